//! The layout never changes a bit (CPU; the GPU twin is tests/cuda_layouts.rs): 300 random
//! problems (every dtype, causal either alignment, GQA/MQA, key lengths, masks, D from 1 to 300),
//! their inputs placed in `[B, S, H, D]`, a padded `[B, S, H, D]` and (where `Sq == Skv`) one fused
//! QKV buffer, the output in each of those layouts: every output bit equals the contiguous
//! `[B, H, S, D]` run's, and nothing outside the output's rows is written.

mod layout_common;

use detattn::inputs::{GenOptions, SplitMix64, generate};
use detattn::tensor::gather;
use detattn::{Element, Engine, Problem, Qkv, Shape, Tensor, TensorMut, bf16, f16};
use layout_common::{KINDS, Kind, layout, place, random_options, untouched_outside_rows};

fn random_problem(rng: &mut SplitMix64) -> Problem {
    let mut r = |n: usize| (rng.next_u64() % n as u64) as usize;
    let d = [1, 3, 8, 64, 80, 128, 256, 300][r(8)];
    let b = 1 + r(2);
    let hkv = 1 + r(3);
    let g = 1 + r(3);
    let sq = 1 + r(40);
    let skv = if r(3) == 0 { sq } else { 1 + r(90) };
    random_options(rng, Shape::new(b, hkv * g, hkv, sq, skv, d))
}

fn check<T: Element>(p: &Problem, seed: u64) -> usize {
    let x = generate::<T>(p, GenOptions::seed(seed));
    let cpu = Engine::cpu();
    let want = cpu
        .run(p, &x.q, &x.k, &x.v, x.mask.as_deref())
        .expect("the contiguous run");
    let bits = |v: &[T]| v.iter().map(|e| e.to_bits_u32()).collect::<Vec<_>>();
    let s = p.shape();
    let qd = [s.batch, s.q_heads, s.q_len, s.head_dim];
    let fill = T::from_bits_u32(0x5EED);
    let mut checked = 0;
    for kind in KINDS {
        if kind == Kind::Fused && s.q_len != s.kv_len {
            continue;
        }
        let ([q, k, v], [lq, lk, lv]) = place(p, kind, &x.q, &x.k, &x.v, fill);
        let inputs = Qkv {
            q: Tensor::new(&q, lq),
            k: Tensor::new(&k, lk),
            v: Tensor::new(&v, lv),
            mask: x.mask.as_deref(),
        };
        for out_kind in [Kind::Bhsd, Kind::Bshd, Kind::Padded] {
            let (lo, n) = layout(out_kind, qd);
            let mut out = vec![fill; n];
            cpu.run_tensors(p, &inputs, TensorMut::new(&mut out, lo))
                .unwrap_or_else(|e| panic!("{kind:?} -> {out_kind:?} {p:?}: {e}"));
            assert_eq!(
                bits(&gather(&out, qd, lo)),
                bits(&want),
                "{kind:?} inputs, {out_kind:?} output, {p:?}: the bits moved"
            );
            assert!(
                untouched_outside_rows(&bits(&out), qd, lo, 0x5EED),
                "{kind:?} -> {out_kind:?} {p:?}: wrote outside the output's rows"
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_layout_gives_the_contiguous_bits() {
    let mut rng = SplitMix64::new(0x1A70);
    let mut n = 0;
    for i in 0..300u64 {
        let p = random_problem(&mut rng);
        n += match i % 3 {
            0 => check::<f32>(&p, i),
            1 => check::<f16>(&p, i),
            _ => check::<bf16>(&p, i),
        };
    }
    assert!(n >= 2700, "only {n} layout pairs checked");
    eprintln!("{n} (input layout, output layout) pairs of 300 problems: the contiguous bits");
}
