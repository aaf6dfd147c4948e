//! Locks by name, in this process: one per customer project (its customer transit) and one
//! per router (its route writes). The leader is the one process that writes, so a lock in it
//! is enough.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// A lock for every key asked for; a key no one holds or waits for is forgotten.
#[derive(Default)]
pub(crate) struct KeyedLocks {
    held: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    /// Hold `key`'s lock until the guard drops.
    pub(crate) async fn hold(&self, key: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut all = self.held.lock().unwrap_or_else(|e| e.into_inner());
            // Only the map refers to an idle key's lock: no one can be waiting on it.
            all.retain(|k, l| k == key || Arc::strong_count(l) > 1);
            all.entry(key.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_holder_per_key_and_idle_keys_are_forgotten() {
        let locks = Arc::new(KeyedLocks::default());
        let a = locks.hold("r1").await;
        // Another key is free while r1 is held.
        let b = tokio::time::timeout(Duration::from_millis(100), locks.hold("r2"))
            .await
            .expect("r2 is not r1's");
        // r1 again waits until the first guard drops.
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move { l2.hold("r1").await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a second holder of r1 got in");
        drop(a);
        let again = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("r1 is free once its guard drops")
            .expect("join");
        drop((again, b));
        let _c = locks.hold("r3").await;
        assert_eq!(locks.keys(), 1, "r1 and r2 are idle and forgotten");
    }
}
