//! Welch's t-test, the statistic of dudect (Reparaz, Balasch, Verbauwhede, "Dude, is my code
//! constant time?", DATE 2017), and dudect's cropping of the upper tail.

/// Running mean and variance (Welford's update: no catastrophic cancellation on long runs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    /// Samples seen.
    pub n: u64,
    /// Their mean.
    pub mean: f64,
    m2: f64,
}

impl Moments {
    /// Add one sample.
    pub fn push(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }

    /// The unbiased sample variance (n − 1 in the denominator); 0 below two samples.
    pub fn variance(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            self.m2 / (self.n - 1) as f64
        }
    }

    /// Moments of a slice.
    pub fn of(xs: &[f64]) -> Moments {
        let mut m = Moments::default();
        for &x in xs {
            m.push(x);
        }
        m
    }
}

/// Welch's t statistic of two samples: `(mean_a − mean_b) / sqrt(var_a/n_a + var_b/n_b)`.
/// 0 when it is undefined (fewer than two samples on a side, or both variances zero with equal
/// means); ±inf when the variances are zero and the means differ (a perfect separation).
pub fn welch_t(a: &Moments, b: &Moments) -> f64 {
    if a.n < 2 || b.n < 2 {
        return 0.0;
    }
    let se2 = a.variance() / a.n as f64 + b.variance() / b.n as f64;
    let d = a.mean - b.mean;
    if se2 == 0.0 {
        return if d == 0.0 {
            0.0
        } else {
            d.signum() * f64::INFINITY
        };
    }
    d / se2.sqrt()
}

/// The value below which a fraction `p` of the sorted samples lies (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// dudect's cropped tests: for each threshold (a percentile of the two classes pooled, so the
/// threshold does not depend on the labels), the t statistic of the samples at or below it.
/// Cropping removes the long upper tail (interrupts, migrations) that inflates the variance, so
/// these tests are more sensitive to small shifts; they are reported next to the raw test.
/// Returns `(percentile, t)` pairs.
pub fn cropped_t(a: &[f64], b: &[f64], percentiles: &[f64]) -> Vec<(f64, f64)> {
    let mut pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    pooled.sort_by(f64::total_cmp);
    percentiles
        .iter()
        .map(|&p| {
            let th = percentile(&pooled, p);
            let ma = Moments::of(&a.iter().copied().filter(|&x| x <= th).collect::<Vec<_>>());
            let mb = Moments::of(&b.iter().copied().filter(|&x| x <= th).collect::<Vec<_>>());
            (p, welch_t(&ma, &mb))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use detattn::inputs::SplitMix64;

    /// A standard normal sample by Box–Muller from SplitMix64 (deterministic).
    fn normals(seed: u64, n: usize) -> Vec<f64> {
        let mut g = SplitMix64::new(seed);
        let mut u = || ((g.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (0..n)
            .map(|_| (-2.0 * u().ln()).sqrt() * (std::f64::consts::TAU * u()).cos())
            .collect()
    }

    #[test]
    fn t_matches_a_hand_computed_value() {
        // a = 1..5: mean 3, variance 2.5; b = 2, 4, …, 10: mean 6, variance 10.
        // t = (3 − 6) / sqrt(2.5/5 + 10/5) = −3 / sqrt(2.5) = −1.8973665961010275
        // (the decimal from Python: -3 / math.sqrt(2.5)).
        let a = Moments::of(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = Moments::of(&[2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(a.mean, 3.0);
        assert_eq!(a.variance(), 2.5);
        assert_eq!(b.variance(), 10.0);
        assert!((welch_t(&a, &b) - (-1.897_366_596_101_027_5)).abs() < 1e-12);
        assert!((welch_t(&b, &a) - 1.897_366_596_101_027_5).abs() < 1e-12);
    }

    #[test]
    fn unequal_sizes_and_variances() {
        // a = [10, 12, 14] (mean 12, var 4), b = [0, 5, 10, 15, 20, 25] (mean 12.5, var 87.5).
        // t = −0.5 / sqrt(4/3 + 87.5/6) = −0.12532679794330703 (Python: -0.5 / math.sqrt(4/3 + 87.5/6)).
        let a = Moments::of(&[10.0, 12.0, 14.0]);
        let b = Moments::of(&[0.0, 5.0, 10.0, 15.0, 20.0, 25.0]);
        assert!((welch_t(&a, &b) - (-0.125_326_797_943_307_03)).abs() < 1e-12);
    }

    #[test]
    fn welford_agrees_with_two_pass_on_large_offsets() {
        // Values around 1e9 (nanosecond timestamps' scale) with spread 1: a naive sum of squares
        // loses everything here; Welford must keep the variance.
        let xs: Vec<f64> = normals(3, 10_000).iter().map(|z| 1e9 + z).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (xs.len() - 1) as f64;
        let m = Moments::of(&xs);
        assert!((m.mean - mean).abs() < 1e-3, "{} vs {mean}", m.mean);
        assert!((m.variance() - var).abs() < 1e-6 * var);
    }

    #[test]
    fn same_distribution_gives_a_small_t_and_a_shift_a_large_one() {
        let n = 10_000;
        let a = normals(1, n);
        let b = normals(2, n);
        let t_same = welch_t(&Moments::of(&a), &Moments::of(&b));
        assert!(t_same.abs() < 4.5, "same distribution: t = {t_same}");
        // A shift of 0.1 standard deviations: expected t = 0.1 / sqrt(2/n) = 7.07.
        let shifted: Vec<f64> = b.iter().map(|x| x + 0.1).collect();
        let t_shift = welch_t(&Moments::of(&shifted), &Moments::of(&a));
        assert!(
            (t_shift - 7.07).abs() < 2.0,
            "0.1 sd shift over 10 000 samples: t = {t_shift}"
        );
    }

    #[test]
    fn degenerate_cases() {
        let one = Moments::of(&[1.0]);
        let two = Moments::of(&[1.0, 1.0]);
        assert_eq!(welch_t(&one, &two), 0.0);
        assert_eq!(welch_t(&two, &two), 0.0);
        assert_eq!(welch_t(&Moments::of(&[2.0, 2.0]), &two), f64::INFINITY);
    }

    #[test]
    fn cropping_removes_an_outlier_tail_but_keeps_a_shift() {
        // A shift of 0.2 sd, with 1% huge outliers (interrupts, say) in both samples: the raw t
        // is drowned by the outliers' variance (expected 0.2 / sqrt(2·9900/10 000) = 0.14), the
        // t cropped at the 90th percentile is not.
        let n = 10_000;
        let mut a = normals(1, n);
        let mut b: Vec<f64> = normals(2, n).iter().map(|x| x + 0.2).collect();
        for x in a.iter_mut().chain(b.iter_mut()).step_by(100) {
            *x += 1000.0;
        }
        let raw = welch_t(&Moments::of(&b), &Moments::of(&a)).abs();
        let crop = cropped_t(&b, &a, &[0.9]);
        assert!(raw < 4.5, "raw t with outliers: {raw}");
        assert!(crop[0].1 > 4.5, "cropped t: {crop:?}");
    }

    #[test]
    fn percentile_by_nearest_rank() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        assert_eq!(percentile(&s, 0.5), 5.0);
        assert_eq!(percentile(&s, 0.9), 9.0);
        assert_eq!(percentile(&s, 1.0), 10.0);
        assert_eq!(percentile(&s, 0.0), 1.0);
    }
}
