//! The replay cache's copies (feature `replay-cache`, behaviour [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)):
//! completed records kept in the process, each until an instant, within a bound on the bytes
//! they take, so that a hot key's replays are answered without a round trip.
//!
//! What keeps a copy exact is the store's: how long a copy may be served, and which changes
//! drop it (a SQL store's time to live and its own forgets; Redis's invalidations). This is
//! only the memory they share.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::{Record, RecordState, Scope};

/// What one copy costs beyond its key, scope and stored response: the record's own fields
/// and the cache's bookkeeping, roughly.
const ENTRY_OVERHEAD: u64 = 200;

/// The average entry size the table is sized for.
const TYPICAL_ENTRY: u64 = 1024;

/// What a store names a record by in its [`ReplayCache`]: the scope itself, or the store's
/// own key for it.
pub trait CacheKey: Eq + Hash + Clone + Send + Sync + 'static {
    /// The bytes the key holds, for the bound on memory.
    fn bytes(&self) -> usize;
}

impl CacheKey for Scope {
    fn bytes(&self) -> usize {
        self.actor.len() + self.operation.len() + self.key.as_str().len()
    }
}

impl CacheKey for String {
    fn bytes(&self) -> usize {
        self.len()
    }
}

/// One copy: the scope it belongs to (a key that two scopes share must not serve the other),
/// the record, and when the process must stop serving it.
#[derive(Clone, Debug)]
struct Entry {
    scope: Scope,
    record: Arc<Record>,
    until: Instant,
}

/// Weighs a copy by the bytes it holds, so that the bound is on memory, not on a count.
#[derive(Clone, Debug)]
struct Bytes;

impl<K: CacheKey> Weighter<K, Entry> for Bytes {
    fn weight(&self, key: &K, entry: &Entry) -> u64 {
        let response = match &entry.record.state {
            RecordState::Completed(stored) => stored.encoded_len(),
            _ => 0,
        };
        let names = key.bytes() + entry.scope.bytes();
        u64::try_from(response + names).unwrap_or(u64::MAX) + ENTRY_OVERHEAD
    }
}

/// Completed records kept in the process under a key `K`, each until an instant, within a
/// bound on the bytes they take. Only completed records are kept: a claim, a release or a
/// takeover always goes to the store, which stays the arbiter of every execution.
///
/// ```
/// # use std::time::{Duration, Instant};
/// # use idemkey_core::{Fingerprint, Key, Operation, Record, RecordId, RecordState, ReplayCache, Scope, StoredResponse};
/// let cache = ReplayCache::<Scope>::new(1 << 20);
/// let scope = Scope::new("alice", &Operation::new("create", "v1"), Key::parse(b"k1").unwrap());
/// let record = Record {
///     record_id: RecordId::new(),
///     version: "v1".into(),
///     fingerprint: Fingerprint::builder("POST", "/").body(b""),
///     token: 1,
///     state: RecordState::Completed(StoredResponse::new(201, "done")),
///     request_id: None,
/// };
/// cache.keep(scope.clone(), scope.clone(), record, Instant::now() + Duration::from_secs(1));
/// assert!(cache.get(&scope, &scope).is_some());
/// ```
#[derive(Debug)]
pub struct ReplayCache<K: CacheKey> {
    entries: Cache<K, Entry, Bytes>,
}

impl<K: CacheKey> ReplayCache<K> {
    /// A cache whose copies take at most about `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        let items = usize::try_from(max_bytes / TYPICAL_ENTRY).unwrap_or(usize::MAX);
        Self {
            entries: Cache::with_weighter(items.max(16), max_bytes, Bytes),
        }
    }

    /// The copy of the scope's record under `key`, if there is one to serve until later than
    /// now; a copy past its time is dropped.
    pub fn get<Q>(&self, key: &Q, scope: &Scope) -> Option<Arc<Record>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entry = self.entries.get(key)?;
        if entry.until <= Instant::now() {
            self.entries.remove(key);
            return None;
        }
        (entry.scope == *scope).then_some(entry.record)
    }

    /// Keeps a copy of the scope's `record` under `key`, to serve until `until`, if it is
    /// completed; any other state is never kept.
    pub fn keep(&self, key: K, scope: Scope, record: Record, until: Instant) {
        if matches!(record.state, RecordState::Completed(_)) {
            let record = Arc::new(record);
            let entry = Entry {
                scope,
                record,
                until,
            };
            self.entries.insert(key, entry);
        }
    }

    /// Drops the copy under `key`, if any: its record changed.
    pub fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.remove(key);
    }

    /// Drops every copy of `actor`'s records.
    pub fn forget_actor(&self, actor: &str) {
        self.entries.retain(|_, entry| entry.scope.actor != actor);
    }

    /// Drops every copy.
    pub fn clear(&self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;
    use crate::{Fingerprint, Key, Operation, RecordId, StoredResponse};

    fn scope(actor: &str) -> Scope {
        Scope::new(
            actor,
            &Operation::new("op", "v1"),
            Key::parse(b"k").unwrap(),
        )
    }

    fn record(state: RecordState) -> Record {
        Record {
            record_id: RecordId::new(),
            version: "v1".into(),
            fingerprint: Fingerprint::builder("POST", "/").body(b""),
            token: 1,
            state,
            request_id: None,
        }
    }

    fn completed() -> Record {
        record(RecordState::Completed(StoredResponse::new(201, "x")))
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn only_completed_records_are_kept() {
        let cache = ReplayCache::<Scope>::new(1 << 20);
        let (a, b) = (scope("a"), scope("b"));
        cache.keep(a.clone(), a.clone(), record(RecordState::Released), later());
        cache.keep(b.clone(), b.clone(), completed(), later());
        assert!(cache.get(&a, &a).is_none());
        assert!(cache.get(&b, &b).is_some());
    }

    #[test]
    fn a_copy_past_its_time_or_of_another_scope_is_not_served() {
        let cache = ReplayCache::<String>::new(1 << 20);
        let (a, b) = (scope("a"), scope("b"));
        cache.keep("k".into(), a.clone(), completed(), later());
        assert!(cache.get("k", &b).is_none());
        assert!(cache.get("k", &a).is_some());
        cache.keep("old".into(), a.clone(), completed(), Instant::now());
        assert!(cache.get("old", &a).is_none());
    }

    #[test]
    fn forgetting_an_actor_drops_its_copies_only() {
        let cache = ReplayCache::<Scope>::new(1 << 20);
        let (a, ab) = (scope("a"), scope("ab"));
        cache.keep(a.clone(), a.clone(), completed(), later());
        cache.keep(ab.clone(), ab.clone(), completed(), later());
        cache.forget_actor("a");
        assert!(cache.get(&a, &a).is_none());
        assert!(cache.get(&ab, &ab).is_some());
        cache.remove(&ab);
        assert!(cache.get(&ab, &ab).is_none());
    }

    #[test]
    fn the_bound_is_on_bytes() {
        let cache = ReplayCache::<String>::new(64 << 10);
        let big = record(RecordState::Completed(StoredResponse::new(
            201,
            "x".repeat(16 << 10),
        )));
        for i in 0..64 {
            cache.keep(format!("k{i}"), scope("a"), big.clone(), later());
        }
        let kept = (0..64)
            .filter(|i| cache.get(&format!("k{i}"), &scope("a")).is_some())
            .count();
        assert!(kept <= 4, "{kept}");
    }
}
