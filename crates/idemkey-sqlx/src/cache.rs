//! An optional in-process cache of completed records (behaviour [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)): a hot key's replays are
//! answered without a database round trip, at the price of a bounded staleness.
//!
//! A completed record never changes until it is forgotten or expires, so a cached copy is
//! exact except after those: `forget` through this store removes it at once; a `forget` by
//! another process, and retention expiry, reach this cache within its time to live. Only
//! completed records are cached: a claim, a release or a takeover always goes to the
//! database, which stays the arbiter of every execution. The copies are core's
//! [`ReplayCache`]; the time to live is this store's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemkey_core::{Record, ReplayCache, Scope};

/// The cache of [`crate::SqlxStore::with_replay_cache`], shared by the store's clones: each
/// copy is served for `ttl` after it was read or committed.
#[derive(Debug)]
pub(crate) struct TtlCache {
    copies: ReplayCache<Scope>,
    ttl: Duration,
}

impl TtlCache {
    pub(crate) fn new(ttl: Duration, max_bytes: u64) -> Self {
        Self {
            copies: ReplayCache::new(max_bytes),
            ttl,
        }
    }

    /// The scope's completed record, if cached within its time to live.
    pub(crate) fn get(&self, scope: &Scope) -> Option<Arc<Record>> {
        self.copies.get(scope, scope)
    }

    /// Keeps `record` if it is completed; any other state is never cached.
    pub(crate) fn remember(&self, scope: &Scope, record: &Record) {
        let until = Instant::now() + self.ttl;
        self.copies
            .keep(scope.clone(), scope.clone(), record.clone(), until);
    }

    pub(crate) fn forget(&self, scope: &Scope) {
        self.copies.remove(scope);
    }

    /// Drops every copy of `actor`'s records: this process forgot them.
    pub(crate) fn forget_actor(&self, actor: &str) {
        self.copies.forget_actor(actor);
    }
}
