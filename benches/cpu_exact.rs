//! Criterion benchmarks of the CPU `Exact` path.
//!
//! - `w1_f32`: workload W1 (B=1, H=16, S=1024, D=64, not causal) in f32, the shape
//!   `scripts/cpu_vs_numpy.py` compares with numpy;
//! - `w1_f32_causal`: the same shape, causal (about half the work);
//! - `w1_bf16`: the same shape in bf16 (inputs widened to f32 exactly, output rounded once).
//!
//! Each iteration is one `Engine::run` call on seeded inputs (never zeros). The default run is
//! short (10 samples, 1 s warm-up, 3 s measurement per benchmark); pass criterion's own flags
//! (`cargo bench --bench cpu_exact -- --sample-size 30`) for more. `cargo test --benches` runs each
//! benchmark once as a smoke test.

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use detattn::inputs::{GenOptions, generate};
use detattn::{Element, Engine, Problem, Shape, bf16};
use std::hint::black_box;
use std::time::Duration;

fn w1(causal: bool) -> Problem {
    Problem::builder(Shape::new(1, 16, 16, 1024, 1024, 64))
        .causal(causal)
        .build()
        .expect("W1 is a valid problem")
}

/// FLOPs by docs/design.md §9's convention (halved for a causal square problem).
fn flops(p: &Problem) -> u64 {
    let s = p.shape();
    let f = 4 * (s.batch * s.q_heads * s.q_len * s.kv_len * s.head_dim) as u64;
    if p.causal() { f / 2 } else { f }
}

fn bench_one<T: Element>(c: &mut Criterion, name: &str, p: &Problem) {
    let engine = Engine::cpu();
    let x = generate::<T>(p, GenOptions::seed(1));
    let mut g = c.benchmark_group("cpu_exact");
    // Flat sampling: each iteration takes ~0.1 s, too long for linear sampling in 3 s.
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        // Criterion prints this as "elem/s": here one element is one FLOP.
        .throughput(Throughput::Elements(flops(p)));
    g.bench_function(name, |b| {
        b.iter(|| {
            engine
                .run(p, black_box(&x.q), black_box(&x.k), black_box(&x.v), None)
                .expect("W1 runs")
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_one::<f32>(c, "w1_f32", &w1(false));
    bench_one::<f32>(c, "w1_f32_causal", &w1(true));
    bench_one::<bf16>(c, "w1_bf16", &w1(false));
}

criterion_group!(cpu_exact, benches);
criterion_main!(cpu_exact);
