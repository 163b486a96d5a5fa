//! Percentiles by nearest rank (the same definition as `tts_engine::stats`): the q-th
//! percentile of n sorted values is the value of rank ceil(q * n), so it is always one of
//! the observed values and p100 is the maximum.

use serde::Serialize;

/// Summary of a set of values (milliseconds in this crate's reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Percentiles {
    /// `None` for no values; NaNs are ignored.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let v = sorted(values)?;
        Some(Self {
            n: v.len(),
            p50: percentile(&v, 0.50),
            p95: percentile(&v, 0.95),
            p99: percentile(&v, 0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

/// The low end of a set of values: how close the worst cases came (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Lows {
    pub n: usize,
    pub min: f64,
    pub p0_1: f64,
    pub p1: f64,
    pub p50: f64,
}

impl Lows {
    /// `None` for no values; NaNs are ignored.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let v = sorted(values)?;
        Some(Self {
            n: v.len(),
            min: v[0],
            p0_1: percentile(&v, 0.001),
            p1: percentile(&v, 0.01),
            p50: percentile(&v, 0.50),
        })
    }
}

/// The values without NaNs, ascending; `None` when none is left.
fn sorted(values: impl IntoIterator<Item = f64>) -> Option<Vec<f64>> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then_some(v)
}

/// The `q` quantile (0 < q <= 1) of sorted values by nearest rank; 0 for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lows_are_the_small_end() {
        let l = Lows::of((1..=2000).rev().map(f64::from)).unwrap();
        assert_eq!(
            (l.n, l.min, l.p0_1, l.p1, l.p50),
            (2000, 1.0, 2.0, 20.0, 1000.0)
        );
        assert_eq!(Lows::of([]), None);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = Percentiles::of((1..=100).map(f64::from)).unwrap();
        assert_eq!((s.p50, s.p95, s.p99, s.max), (50.0, 95.0, 99.0, 100.0));
        assert_eq!(s.mean, 50.5);
        assert_eq!(s.n, 100);
        // Order does not matter; 10 values: p50 rank 5, p95 and p99 rank 10.
        let s = Percentiles::of([9.0, 1.0, 5.0, 3.0, 7.0, 2.0, 8.0, 4.0, 10.0, 6.0]).unwrap();
        assert_eq!((s.p50, s.p95, s.p99), (5.0, 10.0, 10.0));
        // 200 values: p99 is rank 198.
        let s = Percentiles::of((1..=200).map(f64::from)).unwrap();
        assert_eq!((s.p95, s.p99), (190.0, 198.0));
        assert_eq!(Percentiles::of([]), None);
        assert_eq!(Percentiles::of([f64::NAN]), None);
        let one = Percentiles::of([7.5]).unwrap();
        assert_eq!((one.p50, one.p99, one.max), (7.5, 7.5, 7.5));
    }
}
