//! Batch buckets of the talker step and the code-predictor loop: the row counts their
//! graphs are captured for, every call padded up to one of them.

/// The bucket `CudaOptions::batch_bucket_24` adds between 16 and 32 rows (the engine's
/// policy is given it too, so its top-ups fill it).
pub const BUCKET_24: usize = 24;

/// The bucket for a call of `n` rows: a power of two, or [`BUCKET_24`] for 17 to 24 rows
/// with `b24` (`CudaOptions::batch_bucket_24`, when `max_batch` is at least 32), at most
/// `max_batch`.
pub fn batch_bucket(n: usize, max_batch: usize, b24: bool) -> usize {
    let b = match n {
        17..=BUCKET_24 if b24 && max_batch >= 32 => BUCKET_24,
        _ => n.max(1).next_power_of_two(),
    };
    b.min(max_batch)
}

/// Every bucket up to `max_batch`, ascending: 1, 2, 4, 8, 16, 24 (with `b24`), 32, …
pub fn batch_buckets(max_batch: usize, b24: bool) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(1), move |&b| {
        Some(batch_bucket(b + 1, usize::MAX, b24))
    })
    .take_while(move |&b| b <= max_batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pad_to_powers_of_two_or_24() {
        let rows = [0, 1, 3, 16, 17, 24, 25, 33, 64];
        let got: Vec<usize> = rows.map(|n| batch_bucket(n, 64, true)).to_vec();
        assert_eq!(got, vec![1, 1, 4, 16, 24, 24, 32, 64, 64]);
        let got: Vec<usize> = rows.map(|n| batch_bucket(n, 64, false)).to_vec();
        assert_eq!(got, vec![1, 1, 4, 16, 32, 32, 32, 64, 64]);
        // never past the largest batch, and no 24 below a largest batch of 32
        assert_eq!(batch_bucket(20, 16, true), 16);
        assert_eq!(batch_bucket(100, 64, true), 64);
    }

    #[test]
    fn every_call_has_its_bucket_in_the_list() {
        for (max, b24) in [(64, true), (64, false), (32, true), (16, true), (1, true)] {
            let all: Vec<usize> = batch_buckets(max, b24).collect();
            assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
            assert_eq!(all.last(), Some(&max), "{all:?}");
            assert_eq!(all.contains(&24), b24 && max >= 32, "{all:?}");
            for n in 1..=max {
                assert!(
                    all.contains(&batch_bucket(n, max, b24)),
                    "{n} rows of {max}"
                );
            }
        }
    }
}
