//! Per-object retry delays: kube-runtime has none built in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

/// Capped exponential backoff from 1 s to 5 min with ±20 % jitter, per key.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

pub const BASE: Duration = Duration::from_secs(1);
pub const CAP: Duration = Duration::from_secs(300);

impl Backoff {
    /// Record a failure and return how long to wait before the next try.
    pub fn next_delay(&self, key: &str) -> Duration {
        let mut m = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(key.to_string()).or_default();
        *n = n.saturating_add(1);
        let exp = BASE.saturating_mul(1u32 << (*n - 1).min(16)).min(CAP);
        let jitter = rand::rng().random_range(0.8..1.2);
        exp.mul_f64(jitter).min(CAP)
    }

    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_and_resets() {
        let b = Backoff::default();
        let d1 = b.next_delay("a");
        assert!(
            d1 >= Duration::from_millis(800) && d1 <= Duration::from_millis(1200),
            "{d1:?}"
        );
        let d2 = b.next_delay("a");
        assert!(
            d2 >= Duration::from_millis(1600) && d2 <= Duration::from_millis(2400),
            "{d2:?}"
        );
        for _ in 0..20 {
            assert!(b.next_delay("a") <= CAP);
        }
        b.reset("a");
        assert!(b.next_delay("a") <= Duration::from_millis(1200));
        assert!(b.next_delay("other") <= Duration::from_millis(1200));
    }
}
