//! An optional in-process cache of completed records (behaviour [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)): a hot key's replays are
//! answered without a database round trip, at the price of a bounded staleness.
//!
//! A completed record never changes until it is forgotten or expires, so a cached copy is
//! exact except after those: `forget` through this store removes it at once; a `forget` by
//! another process, and retention expiry, reach this cache within its time to live. Only
//! completed records are cached: a claim, a release or a takeover always goes to the
//! database, which stays the arbiter of every execution.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemkey_core::{Record, RecordState, Scope};
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// What one cached record costs beyond its key and stored response: the record's own fields
/// and the cache's bookkeeping, roughly.
const ENTRY_OVERHEAD: u64 = 160;

/// The average entry size the cache sizes its table for.
const TYPICAL_ENTRY: usize = 1024;

#[derive(Clone, Debug)]
struct Entry {
    record: Arc<Record>,
    until: Instant,
}

/// Weighs an entry by the bytes it holds, so the bound is on memory, not on a count.
#[derive(Clone, Debug)]
struct Bytes;

impl Weighter<Scope, Entry> for Bytes {
    fn weight(&self, scope: &Scope, entry: &Entry) -> u64 {
        let response = match &entry.record.state {
            RecordState::Completed(stored) => stored.encoded_len(),
            _ => 0,
        };
        let key = scope.actor.len() + scope.operation.len() + scope.key.as_str().len();
        u64::try_from(response + key).unwrap_or(u64::MAX) + ENTRY_OVERHEAD
    }
}

/// The cache of [`crate::SqlxStore::with_replay_cache`], shared by the store's clones.
#[derive(Debug)]
pub(crate) struct ReplayCache {
    entries: Cache<Scope, Entry, Bytes>,
    ttl: Duration,
}

impl ReplayCache {
    pub(crate) fn new(ttl: Duration, max_bytes: u64) -> Self {
        let items = usize::try_from(max_bytes).unwrap_or(usize::MAX) / TYPICAL_ENTRY;
        Self {
            entries: Cache::with_weighter(items.max(16), max_bytes, Bytes),
            ttl,
        }
    }

    /// The scope's completed record, if cached within its time to live.
    pub(crate) fn get(&self, scope: &Scope) -> Option<Arc<Record>> {
        let entry = self.entries.get(scope)?;
        if entry.until > Instant::now() {
            return Some(entry.record);
        }
        self.entries.remove(scope);
        None
    }

    /// Keeps `record` if it is completed; any other state is never cached.
    pub(crate) fn remember(&self, scope: &Scope, record: &Record) {
        if matches!(record.state, RecordState::Completed(_)) {
            let entry = Entry {
                record: Arc::new(record.clone()),
                until: Instant::now() + self.ttl,
            };
            self.entries.insert(scope.clone(), entry);
        }
    }

    pub(crate) fn forget(&self, scope: &Scope) {
        self.entries.remove(scope);
    }

    /// Drops every copy of `actor`'s records: this process forgot them.
    pub(crate) fn forget_actor(&self, actor: &str) {
        self.entries.retain(|scope, _| scope.actor != actor);
    }
}
