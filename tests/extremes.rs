//! The structured extreme inputs of tests/extremes_common on the CPU (the `Exact` path's
//! reference): every output finite and every row that sees no key exactly +0, for every pattern,
//! structure and dtype, at head dims that cover the CPU kernel's whole and partial 64-column
//! chunks. (The GPU tests hold both GPU paths to the same patterns.)

mod extremes_common;

use detattn::{Element, Engine, bf16, f16};
use extremes_common::{PATTERNS, STRUCTURES, mask, pattern, sees_a_key, structure};

fn one<T: Element>(e: &Engine, d: usize) -> usize {
    let mut n = 0;
    for st in STRUCTURES {
        let p = structure(st, d);
        let s = *p.shape();
        let m = mask(&p);
        for pq in PATTERNS {
            for (pk, kphase) in [(pq, 0), (pq, 1)] {
                let q = pattern::<T>(pq, s.batch * s.q_heads * s.q_len, d, 0);
                let k = pattern::<T>(pk, s.batch * s.kv_heads * s.kv_len, d, kphase);
                let v = pattern::<T>("alternating_max", s.batch * s.kv_heads * s.kv_len, d, 0);
                let out = e.run(&p, &q, &k, &v, m.as_deref()).expect("cpu");
                for b in 0..s.batch {
                    for h in 0..s.q_heads {
                        for i in 0..s.q_len {
                            let row = &out[((b * s.q_heads + h) * s.q_len + i) * d..][..d];
                            let what = format!(
                                "{} d{d} {st} q {pq} k {pk}/{kphase}: row ({b},{h},{i})",
                                T::DTYPE
                            );
                            assert!(
                                row.iter().all(|v| v.to_f32().is_finite()),
                                "{what} not finite"
                            );
                            if !sees_a_key(&p, m.as_deref(), b, h, i) {
                                assert!(row.iter().all(|v| v.to_bits_u32() == 0), "{what}: not +0");
                            }
                        }
                    }
                }
                n += 1;
            }
        }
    }
    n
}

#[test]
fn structured_extremes_are_finite_on_the_cpu() {
    let e = Engine::cpu();
    let mut n = 0;
    for d in [64, 96, 256] {
        n += one::<f32>(&e, d);
        n += one::<f16>(&e, d);
        n += one::<bf16>(&e, d);
    }
    assert_eq!(n, 7 * 7 * 2 * 9);
}
