#!/bin/bash
# Session 8, call 4: the Python package on the GPU after 8f13fc1 (one integer reader) with the early
# merge (6a397af); profiles for the next steps: dec_scores at Exact decode B32 and tc_dec at B1
# S131072 Hkv1 (Nsight Compute, full set, printed details).
set -u
L=$OUT/logs; mkdir -p $L
S=$L/summary.txt
tar -C .carry -xJf .carry/bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/gpu.txt; date -u >> $L/gpu.txt
python3 -m pip install -q --no-deps --target /tmp/pyd python/dist/*.whl > $L/pip.log 2>&1
(cd /tmp && PYTHONPATH=/tmp/pyd timeout 200 python3 $OLDPWD/scripts/python-gpu.py --cli $OLDPWD/.carry/bin/detattn --out $L/py --only env,selftest,paged,varlen,lse) > $L/python-gpu.log 2>&1
echo "python-gpu rc=$? $(tail -1 $L/python-gpu.log)" >> $S
NEW=.carry/bin/detattn
G="--backend cuda --dtype bf16 --q-heads 32 --kv-heads 8 --q-len 1 --head-dim 128 --kv-len 8192 --batch 32"
timeout 150 ncu --clock-control none --set full -f -o $L/scores -k regex:detattn_dec_scores_bf16 -c 1 $NEW bench --path exact $G --warmup 0 --iters 1 > $L/ncu-scores-run.txt 2>&1
ncu --import $L/scores.ncu-rep --print-details all > $L/ncu-scores.txt 2>&1; rm -f $L/scores.ncu-rep
echo "ncu dec_scores B32: $(grep -E 'Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy' $L/ncu-scores.txt | head -6 | tr -s ' ' | tr '\n' ';')" >> $S
A="--backend cuda --path tensorcore --dtype bf16 --batch 1 --q-heads 4 --kv-heads 1 --q-len 1 --kv-len 131072 --head-dim 128"
timeout 150 ncu --clock-control none --set full -f -o $L/tcdec -k regex:tc_dec_bf16 -c 1 $NEW bench $A --warmup 0 --iters 1 > $L/ncu-tcdec-run.txt 2>&1
ncu --import $L/tcdec.ncu-rep --print-details all > $L/ncu-tcdec.txt 2>&1; rm -f $L/tcdec.ncu-rep
echo "ncu tc_dec B1 S131072: $(grep -E 'Duration|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occupancy' $L/ncu-tcdec.txt | head -6 | tr -s ' ' | tr '\n' ';')" >> $S
cd $OUT && tar czf logs.tar.gz logs
