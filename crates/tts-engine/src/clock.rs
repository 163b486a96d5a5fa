//! Time as the engine sees it: a duration since the engine's epoch. The real engine reads
//! a monotonic clock; the simulator's clock only moves when its fake backend "computes".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of the current time, as a duration since an epoch.
pub trait Clock: Send {
    fn now(&self) -> Duration;
}

/// The wall clock (monotonic), counted from when it was made.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    epoch: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    /// The instant corresponding to `t` on this clock.
    pub fn instant(&self, t: Duration) -> Instant {
        self.epoch + t
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

/// A simulated clock shared by the simulator and its fake backend.
#[derive(Debug, Clone, Default)]
pub struct SimClock {
    nanos: Arc<AtomicU64>,
}

impl SimClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn advance(&self, d: Duration) {
        self.nanos.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Moves the clock to `t` (never backwards).
    pub fn advance_to(&self, t: Duration) {
        self.nanos.fetch_max(t.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}
