//! A cache of the last few values computed from keys compared by
//! equality: for work a long-running runner repeats for every execution
//! with the same few inputs (a profile's seccomp program and digest, a
//! published root's declared environment), where hashing a key would cost
//! about what comparing it does and a handful of entries hold them all.
//!
//! Only successes are kept; the newest hit moves to the front, and the
//! least recently used entry goes when a new one would pass the capacity.
//! The value is made outside the lock, so two threads that miss at once
//! may both make it (the second's is kept): callers cache pure functions.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Up to `cap` key/value pairs, most recently used first.
#[derive(Debug)]
pub struct Recent<K, V> {
    cap: usize,
    entries: Mutex<VecDeque<(K, V)>>,
}

impl<K, V: Clone> Recent<K, V> {
    /// An empty cache of at most `cap` entries (at least one).
    pub const fn new(cap: usize) -> Recent<K, V> {
        Recent {
            cap: if cap == 0 { 1 } else { cap },
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The value of the first key `is` accepts; else `make`'s, kept under
    /// `key()` when it succeeds.
    pub fn get_or_try<E>(
        &self,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        {
            let mut entries = self.lock();
            if let Some(i) = entries.iter().position(|(k, _)| is(k)) {
                let hit = entries.remove(i).expect("a found position is in range");
                let value = hit.1.clone();
                entries.push_front(hit);
                return Ok(value);
            }
        }
        let value = make()?;
        let mut entries = self.lock();
        entries.retain(|(k, _)| !is(k));
        entries.push_front((key(), value.clone()));
        entries.truncate(self.cap);
        Ok(value)
    }

    /// [`Recent::get_or_try`] of a value that is always made.
    pub fn get_or_insert(
        &self,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        make: impl FnOnce() -> V,
    ) -> V {
        match self.get_or_try(is, key, || Ok::<_, std::convert::Infallible>(make())) {
            Ok(value) => value,
            Err(never) => match never {},
        }
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(K, V)>> {
        // A panic while holding it leaves a consistent deque.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;
    use std::cell::Cell;

    fn get(cache: &Recent<u32, String>, k: u32, made: &Cell<u32>) -> String {
        cache
            .get_or_try(
                |x| *x == k,
                || k,
                || {
                    made.set(made.get() + 1);
                    Ok::<_, ()>(format!("v{k}"))
                },
            )
            .unwrap()
    }

    #[test]
    fn a_key_seen_before_is_not_made_again() {
        let cache = Recent::new(4);
        let made = Cell::new(0);
        assert_eq!(get(&cache, 1, &made), "v1");
        assert_eq!(get(&cache, 2, &made), "v2");
        assert_eq!(get(&cache, 1, &made), "v1");
        assert_eq!(made.get(), 2);
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn the_least_recently_used_key_goes_first() {
        let cache = Recent::new(2);
        let made = Cell::new(0);
        get(&cache, 1, &made);
        get(&cache, 2, &made);
        get(&cache, 1, &made); // 1 is now the newest
        get(&cache, 3, &made); // so 2 goes
        assert_eq!(made.get(), 3);
        get(&cache, 1, &made);
        assert_eq!(made.get(), 3, "1 was kept");
        get(&cache, 2, &made);
        assert_eq!(made.get(), 4, "2 was dropped and made again");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_failure_is_not_kept() {
        let cache: Recent<u32, String> = Recent::new(2);
        let failed = cache.get_or_try(|x| *x == 1, || 1, || Err("no"));
        assert_eq!(failed, Err("no"));
        assert!(cache.is_empty());
        let made = Cell::new(0);
        assert_eq!(get(&cache, 1, &made), "v1");
        assert_eq!(made.get(), 1);
    }
}
