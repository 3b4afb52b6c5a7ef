#!/usr/bin/env python3
"""Where a kernel's warps spend their samples, by stretch of machine code.

Reads the SASS source page of an Nsight Compute report as CSV (`ncu --import REP --page source
--csv --print-source sass > X.csv`, as scripts/gpu-profile.sh writes it) and groups consecutive
instructions that ran the same number of times into segments: in a warp-specialised kernel each
role's loop body is then one segment (the chain warp's body, the widening warp's, the copier's),
so the samples of each role can be told apart where the per-kernel stall totals mix them. Prints
the segments with the most samples: offsets, executions, instruction count, samples, the largest
stall reasons and the most frequent opcodes.

    python3 scripts/ncu_segments.py X.csv [how many, default 25]
"""
import collections
import csv
import sys


def opcode(src):
    words = src.split()
    if not words:
        return "?"
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def main():
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(f))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    # Row 0 names the kernel; row 1 is the header.
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "(Not" not in h]

    def num(r, h):
        return int(r[ix[h]].replace(",", "") or 0)

    segs = []
    for r in rows[2:]:
        if len(r) < len(hdr):
            continue
        try:
            addr, ex = int(r[0], 16), num(r, "Instructions Executed")
        except ValueError:
            continue
        samples = num(r, "Warp Stall Sampling (All Samples)")
        if not segs or segs[-1]["ex"] != ex:
            segs.append({"start": addr, "end": addr, "ex": ex, "n": 0, "s": 0,
                         "why": collections.Counter(), "ops": collections.Counter()})
        g = segs[-1]
        g["end"], g["n"], g["s"] = addr, g["n"] + 1, g["s"] + samples
        g["ops"][opcode(r[1].strip())] += 1
        for h in stalls:
            g["why"][h[6:]] += num(r, h)
    base = segs[0]["start"] if segs else 0
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}: {sum(g['s'] for g in segs)} samples")
    for g in sorted(segs, key=lambda g: -g["s"])[:top]:
        why = ", ".join(f"{k} {v}" for k, v in g["why"].most_common(4) if v)
        ops = " ".join(f"{k}:{v}" for k, v in g["ops"].most_common(6))
        print(f"{g['start'] - base:#07x}-{g['end'] - base:#07x} ran {g['ex']:7d} n {g['n']:4d} "
              f"samples {g['s']:6d} | {why} | {ops}")


if __name__ == "__main__":
    main()
