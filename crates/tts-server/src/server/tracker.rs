//! Counts live things (connections, WebSocket sessions) so that shutdown can wait for
//! them to end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Debug, Default, Clone)]
pub struct Tracker {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    count: AtomicUsize,
    changed: Notify,
}

/// One tracked thing; dropping it untracks it.
#[derive(Debug)]
pub struct Tracked {
    inner: Arc<Inner>,
}

impl Tracker {
    pub fn track(&self) -> Tracked {
        self.inner.count.fetch_add(1, Ordering::AcqRel);
        Tracked {
            inner: self.inner.clone(),
        }
    }

    pub fn count(&self) -> usize {
        self.inner.count.load(Ordering::Acquire)
    }

    /// Resolves when nothing is tracked.
    pub async fn idle(&self) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.inner.count.fetch_sub(1, Ordering::AcqRel);
        self.inner.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_the_last_one() {
        let t = Tracker::default();
        t.idle().await;
        let a = t.track();
        let b = t.track();
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.idle().await }
        });
        drop(a);
        assert_eq!(t.count(), 1);
        drop(b);
        waiter.await.unwrap();
        assert_eq!(t.count(), 0);
    }
}
