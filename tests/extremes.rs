//! The structured extreme inputs of tests/extremes_common on the CPU (the `Exact` path's
//! reference): every output finite and every row that sees no key exactly +0, for every pattern,
//! structure and dtype, at head dims that cover the CPU kernel's whole and partial 64-column
//! chunks. (The GPU tests hold both GPU paths to the same patterns.)

mod extremes_common;

use detattn::{Element, Engine, bf16, f16};
use extremes_common::{assert_finite_and_unseen_zero, for_each_case};

fn one<T: Element>(e: &Engine, d: usize) -> usize {
    for_each_case::<T>(
        d,
        |pq| vec![(pq, 0), (pq, 1)],
        |_| vec!["alternating_max"],
        |c| {
            let out = e
                .run(&c.problem, &c.q, &c.k, &c.v, c.mask.as_deref())
                .expect("cpu");
            assert_finite_and_unseen_zero(c, &out);
        },
    )
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
