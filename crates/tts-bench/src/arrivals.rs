//! The open-loop arrival schedule: Poisson arrivals (independent exponential gaps) at a given
//! rate, and the prompt order. Both come from a small seeded generator written out here
//! (SplitMix64), so a seed gives the same schedule on every machine and crate version.

use std::time::Duration;

/// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, one add and a mix per draw.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (n > 0), by multiply-shift (bias below 2^-32 for the sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// Arrival times in [0, horizon) of a Poisson process with `rate` arrivals per second.
/// An empty schedule for a rate that is not positive and finite.
pub fn poisson_arrivals(rate: f64, horizon: Duration, seed: u64) -> Vec<Duration> {
    let mut out = Vec::new();
    if !(rate.is_finite() && rate > 0.0) {
        return out;
    }
    let mut rng = SplitMix64::new(seed);
    let horizon = horizon.as_secs_f64();
    let mut t = 0.0f64;
    loop {
        // Inverse CDF of the exponential distribution; 1 - u lies in (0, 1].
        t += -(1.0 - rng.next_f64()).ln() / rate;
        if t >= horizon {
            return out;
        }
        out.push(Duration::from_secs_f64(t));
    }
}

/// The seed of the schedule of the `index`-th rate of a sweep: distinct per rate, so a
/// sweep's rates do not share gap sequences, and fixed by the run's seed.
pub fn rate_seed(seed: u64, index: usize) -> u64 {
    let mut mix = SplitMix64::new(seed ^ 0xA076_1D64_78BD_642F);
    for _ in 0..=index {
        mix.next_u64();
    }
    mix.next_u64()
}

/// A permutation of 0..n (Fisher-Yates) fixed by the seed: the i-th request of every rate
/// gets prompt `order[i % n]`, so the rates of a sweep see the same texts in the same order.
pub fn prompt_order(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(seed ^ 0xE703_7ED1_A0B4_28DB);
    for i in (1..n).rev() {
        let j = rng.below(i + 1);
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_rate_and_exponential_gaps() {
        let rate = 50.0;
        let horizon = Duration::from_secs(2000);
        let a = poisson_arrivals(rate, horizon, 7);
        // Expected 100,000 arrivals, standard deviation ~316: 1.5% is ~5 sigma.
        let n = a.len() as f64;
        assert!(
            (n / 2000.0 - rate).abs() < rate * 0.015,
            "rate {}",
            n / 2000.0
        );
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert!(a.iter().all(|&t| t < horizon));
        // Exponential gaps: mean 1/rate, coefficient of variation 1.
        let gaps: Vec<f64> = a.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((mean * rate - 1.0).abs() < 0.02, "mean gap {mean}");
        assert!(
            (var.sqrt() / mean - 1.0).abs() < 0.03,
            "cv {}",
            var.sqrt() / mean
        );
    }

    #[test]
    fn schedules_are_reproducible_by_seed() {
        let h = Duration::from_secs(30);
        assert_eq!(poisson_arrivals(10.0, h, 1), poisson_arrivals(10.0, h, 1));
        assert_ne!(poisson_arrivals(10.0, h, 1), poisson_arrivals(10.0, h, 2));
        assert_ne!(rate_seed(1, 0), rate_seed(1, 1));
        assert_eq!(rate_seed(3, 2), rate_seed(3, 2));
        assert!(poisson_arrivals(0.0, h, 1).is_empty());
        assert!(poisson_arrivals(f64::NAN, h, 1).is_empty());
    }

    #[test]
    fn prompt_order_is_a_seeded_permutation() {
        let a = prompt_order(1000, 5);
        assert_eq!(a, prompt_order(1000, 5));
        assert_ne!(a, prompt_order(1000, 6));
        assert_ne!(a, (0..1000).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert!(prompt_order(0, 1).is_empty());
        assert_eq!(prompt_order(1, 1), vec![0]);
    }
}
