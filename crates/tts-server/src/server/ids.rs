//! Request ids and seeds: unpredictable enough, no extra dependency.

use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh 64-bit value from the clock, the process id and a counter (splitmix64).
pub fn random_u64() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = t ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A new request id, `req_` and 16 hex digits.
pub fn request_id() -> String {
    format!("req_{:016x}", random_u64())
}

/// Whether a client-sent request id can be echoed: 1-128 visible ASCII characters.
pub fn valid_request_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_validate() {
        let (a, b) = (request_id(), request_id());
        assert_ne!(a, b);
        assert!(valid_request_id(&a));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
        assert!(!valid_request_id(&"x".repeat(129)));
    }
}
