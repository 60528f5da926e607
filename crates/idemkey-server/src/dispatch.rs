//! [`Database`] as a [`Store`]: the one place that matches on the backend for commands that
//! need only the store (the proxy, `sweep`, `forget`), so that a new backend is one arm here
//! instead of one in each of them.

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{
    ActorCaps, ActorForgotten, Claim, ClaimRequest, OwnerId, Record, Result, Scope, Store,
    StoredResponse, TryClaim,
};

use crate::database::Database;

/// Runs `$call` on whichever store `$database` holds, bound to `$store`.
macro_rules! on_backend {
    ($database:expr, $store:ident => $call:expr) => {
        crate::on_sql_backend!($database, $store => $call, $store => $call)
    };
}

impl Store for Database {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        on_backend!(self, store => store.lookup(scope).await)
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        on_backend!(self, store => store.try_claim(request).await)
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        on_backend!(self, store => store.reclaim(request, seen).await)
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        on_backend!(self, store => store.complete(claim, response).await)
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        on_backend!(self, store => store.release(claim).await)
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        on_backend!(self, store => store.discard(claim).await)
    }

    async fn flush_claim(&self, claim: &Claim) -> Result<()> {
        on_backend!(self, store => store.flush_claim(claim).await)
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        on_backend!(self, store => store.extend(claim).await)
    }

    async fn beat(&self, owner: OwnerId, grace: Duration) -> Result<()> {
        on_backend!(self, store => store.beat(owner, grace).await)
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        on_backend!(self, store => store.forget(scope).await)
    }

    async fn forget_version(&self, scope: &Scope, version: &str) -> Result<bool> {
        on_backend!(self, store => store.forget_version(scope, version).await)
    }

    async fn forget_actor(&self, actor: &str) -> Result<ActorForgotten> {
        on_backend!(self, store => store.forget_actor(actor).await)
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        on_backend!(self, store => store.sweep(batch).await)
    }

    fn with_caps(self, caps: ActorCaps) -> Result<Self> {
        Ok(match self {
            Self::Sqlite(store) => Self::Sqlite(store.with_actor_caps(caps)),
            Self::Postgres(store) => Self::Postgres(store.with_actor_caps(caps)),
            Self::Mysql(store) => Self::Mysql(store.with_actor_caps(caps)),
            Self::Redis(records) => Self::Redis(records.with_actor_caps(caps)),
        })
    }

    fn lookup_first(&self) -> bool {
        on_backend!(self, store => store.lookup_first())
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        on_backend!(self, store => store.secret().await)
    }
}

impl Database {
    /// The same store keeping completed records in memory for `ttl` (at most
    /// [`crate::REPLAY_CACHE_BYTES`]), so that replays of a hot key skip the database (see
    /// `SqlxStore::with_replay_cache`). Redis records are unchanged: their replay cache is
    /// set up as they are opened ([`crate::RedisSetup::replay_cache`]), kept exact by Redis.
    #[must_use]
    pub fn with_replay_cache(self, ttl: Duration) -> Self {
        let bytes = crate::REPLAY_CACHE_BYTES;
        match self {
            Self::Sqlite(store) => Self::Sqlite(store.with_replay_cache(ttl, bytes)),
            Self::Postgres(store) => Self::Postgres(store.with_replay_cache(ttl, bytes)),
            Self::Mysql(store) => Self::Mysql(store.with_replay_cache(ttl, bytes)),
            Self::Redis(records) => Self::Redis(records),
        }
    }
}
