//! The replay cache: completed records kept in the process, so that a hot key's replays are
//! answered without a round trip, and kept exact by the server's own invalidations (client-side
//! caching, `CLIENT TRACKING` over RESP3).
//!
//! Why a copy is never served after the record changed:
//! - A copy is filled only by a read on the tracking connection (`lua/cached.lua`), so the
//!   server remembers that this connection holds the key, and sends an `invalidate` push on
//!   that connection the next time the key changes: a `forget`, an expiry that deletes it, a
//!   `DEL` or `FLUSHALL` from anyone. Replies and pushes come over one socket in the server's
//!   order, and the connection's reader hands each push to [`Invalidations`] before it reads on.
//! - A push can still be handled between the fill's reply and its insertion. Every push bumps
//!   a generation under the same lock as the insertion, and a fill inserts only if the
//!   generation is the one it saw before it read: a change after the read is never missed.
//! - A record's expiry is kept by this process's clock: the fill reads the time the record has
//!   left by the server's clock and counts it from before it sent the read, so the copy goes
//!   before the record does. No copy is older than [`MAX_AGE`], so clock drift cannot add up.
//! - A lost connection loses its invalidations: the cache empties on the disconnection, and
//!   serves nothing until a new tracking connection answers. A connection that hangs without
//!   closing is caught by a heartbeat: copies are served only while the last `PING` answered
//!   was sent less than the staleness bound ago, and every push the server sent before it
//!   answered that `PING` has been handled by then.
//!
//! What is not exact: a push is on its way for microseconds after the change, so a request
//! that reaches this process in that window is still answered from the copy.
//!
//! redis-rs's own client-side cache (`cache-aio`) caches commands' replies; it cannot cache a
//! script's, nor know a record's expiry, hence this module.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use idemkey_core::{Error, Record, RecordState, ReplayCache, Result, Scope};
use redis::aio::{AsyncPushSender, MultiplexedConnection, SendError};
use redis::{
    AsyncConnectionConfig, IntoConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value,
};

use crate::record;

/// The oldest a copy gets, however long its record lives: a bound on clock drift too.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);

/// The default staleness bound: how long ago the last answered heartbeat may have been sent.
pub(crate) const DEFAULT_STALENESS: Duration = Duration::from_secs(1);

/// What the lock guards: the generation every change bumps, and the tracking connection with
/// its epoch (bumped whenever a connection is lost or made).
#[derive(Default)]
struct State {
    generation: u64,
    epoch: u64,
    conn: Option<MultiplexedConnection>,
}

/// What the cache, its tracking task and the connection's push handler share.
struct Shared {
    /// The copies, under their records' Redis keys.
    entries: ReplayCache<String>,
    state: Mutex<State>,
    /// Nanoseconds after `base` until which copies may be served (0: not at all).
    fresh_until: AtomicU64,
    base: Instant,
    staleness: Duration,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn fresh(&self, now: Instant) -> bool {
        self.nanos(now) < self.fresh_until.load(Ordering::Acquire)
    }

    /// Drops the copies of `keys`.
    fn invalidate<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let _state = self.bump();
        for key in keys {
            self.entries.remove(key);
        }
    }

    /// Drops every copy (a push naming no key: `FLUSHALL`, `FLUSHDB`).
    fn invalidate_all(&self) {
        let _state = self.bump();
        self.entries.clear();
    }

    /// The lock, held, after a new generation: a fill that read before now inserts nothing.
    fn bump(&self) -> MutexGuard<'_, State> {
        let mut state = self.lock();
        state.generation += 1;
        state
    }

    /// Forgets the connection and every copy: invalidations may have been lost.
    fn disconnected(&self) {
        let mut state = self.bump();
        state.epoch += 1;
        state.conn = None;
        self.fresh_until.store(0, Ordering::Release);
        self.entries.clear();
    }

    /// A new tracking connection; the copies stay unserved until its first heartbeat.
    fn connected(&self, conn: MultiplexedConnection) -> u64 {
        let mut state = self.bump();
        state.epoch += 1;
        state.conn = Some(conn);
        state.epoch
    }

    /// A heartbeat sent at `sent` on connection `epoch` was answered.
    fn confirmed(&self, epoch: u64, sent: Instant) {
        let state = self.lock();
        if state.epoch == epoch {
            let until = self.nanos(sent + self.staleness);
            self.fresh_until.fetch_max(until, Ordering::AcqRel);
        }
    }

    /// The generation and the connection a fill reads with, if there is one.
    fn snapshot(&self) -> Option<(u64, MultiplexedConnection)> {
        let state = self.lock();
        Some((state.generation, state.conn.clone()?))
    }

    /// Keeps a fill's copy, to serve until `until`, unless anything changed since it read.
    fn insert(&self, generation: u64, key: String, scope: Scope, record: Record, until: Instant) {
        let state = self.lock();
        if state.generation == generation {
            self.entries.keep(key, scope, record, until);
        }
    }
}

/// A key named in an `invalidate` push.
fn text(key: &Value) -> Option<&str> {
    match key {
        Value::BulkString(key) => std::str::from_utf8(key).ok(),
        Value::SimpleString(key) => Some(key),
        _ => None,
    }
}

/// The tracking connection's push handler, called by its reader in the socket's order.
struct Invalidations(Weak<Shared>);

impl AsyncPushSender for Invalidations {
    fn send(&self, info: PushInfo) -> std::result::Result<(), SendError> {
        let Some(shared) = self.0.upgrade() else {
            return Err(SendError);
        };
        match info.kind {
            PushKind::Invalidate => match info.data.first() {
                Some(Value::Array(keys)) => shared.invalidate(keys.iter().filter_map(text)),
                _ => shared.invalidate_all(),
            },
            PushKind::Disconnection => shared.disconnected(),
            _ => {}
        }
        Ok(())
    }
}

/// The replay cache of one store and its clones, kept exact by tracking (see the module's
/// documentation).
pub(crate) struct TrackedCache {
    shared: Arc<Shared>,
    tracker: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for TrackedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedCache")
            .field("staleness", &self.shared.staleness)
            .finish_non_exhaustive()
    }
}

impl Drop for TrackedCache {
    fn drop(&mut self) {
        self.tracker.abort();
    }
}

impl TrackedCache {
    /// A client for the server at `url` that speaks RESP3, whose pushes carry invalidations.
    pub(crate) fn resp3(url: &str, options: &crate::RedisOptions) -> Result<redis::Client> {
        let info = url.into_connection_info().map_err(backend)?;
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        options.client(info.set_redis_settings(resp3))
    }

    /// A cache of at most `max_bytes`, tracking over its own RESP3 connection of `client`, and
    /// serving copies only while a heartbeat sent less than `staleness` ago was answered.
    /// Waits for the first heartbeat, so that a server that cannot track is refused here.
    pub(crate) async fn start(
        client: redis::Client,
        max_bytes: u64,
        staleness: Duration,
        config: AsyncConnectionConfig,
    ) -> Result<Self> {
        let shared = Arc::new(Shared {
            entries: ReplayCache::new(max_bytes),
            state: Mutex::default(),
            fresh_until: AtomicU64::new(0),
            base: Instant::now(),
            staleness,
        });
        let tracker = Tracker {
            shared: Arc::downgrade(&shared),
            client,
            config,
            every: staleness / 4,
        };
        let conn = tracker.connect().await?;
        let epoch = shared.connected(conn.clone());
        tracker.beat(epoch, &mut conn.clone()).await?;
        let tracker = tokio::spawn(tracker.run(epoch, conn));
        Ok(Self { shared, tracker })
    }

    /// The copy of the scope's record under Redis key `key`, if there is a fresh one.
    pub(crate) fn get(&self, key: &str, scope: &Scope) -> Option<Arc<Record>> {
        let now = Instant::now();
        if !self.shared.fresh(now) {
            return None;
        }
        self.shared.entries.get(key, scope)
    }

    /// Reads the scope's record on the tracking connection and keeps it if it is completed.
    /// Best effort: a failure only leaves the cache without this copy.
    pub(crate) async fn fill(
        &self,
        key: String,
        scope: Scope,
        invocation: redis::ScriptInvocation<'_>,
        timeout: Duration,
    ) {
        let Some((generation, mut conn)) = self.shared.snapshot() else {
            return;
        };
        let sent = Instant::now();
        let reply = tokio::time::timeout(timeout, invocation.invoke_async::<Value>(&mut conn));
        let found = match reply.await {
            Ok(Ok(value)) => record::cached(value),
            Ok(Err(error)) => Err(backend(error)),
            Err(_) => return,
        };
        match found {
            Ok(Some((record, left))) if matches!(record.state, RecordState::Completed(_)) => {
                let until = sent + left.min(MAX_AGE);
                self.shared.insert(generation, key, scope, record, until);
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "the replay cache could not read a record"),
        }
    }

    /// Drops the copy under Redis key `key`: this process changed the record.
    pub(crate) fn forget(&self, key: &str) {
        self.shared.invalidate([key]);
    }

    /// Returns once every invalidation the server sent before now has been applied: a `PING`
    /// on the tracking connection, answered after them. For tests and tools.
    pub(crate) async fn sync(&self) -> Result<()> {
        let Some((_, mut conn)) = self.shared.snapshot() else {
            return Err(Error::Unavailable(
                "the replay cache is not connected".into(),
            ));
        };
        redis::cmd("PING")
            .query_async::<Value>(&mut conn)
            .await
            .map(drop)
            .map_err(backend)
    }
}

/// The task that keeps a tracking connection: reconnects, and confirms freshness with a
/// heartbeat.
struct Tracker {
    shared: Weak<Shared>,
    client: redis::Client,
    config: AsyncConnectionConfig,
    every: Duration,
}

impl Tracker {
    /// A RESP3 connection whose pushes go to [`Invalidations`], with tracking on.
    async fn connect(&self) -> Result<MultiplexedConnection> {
        let config = self
            .config
            .clone()
            .set_push_sender(Invalidations(self.shared.clone()));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(backend)?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| Error::Backend(format!("the server cannot track keys: {e}").into()))?;
        Ok(conn)
    }

    /// One heartbeat on connection `epoch`; an error if it was not answered in time.
    async fn beat(&self, epoch: u64, conn: &mut MultiplexedConnection) -> Result<()> {
        let sent = Instant::now();
        let ping = redis::cmd("PING");
        match tokio::time::timeout(self.every * 2, ping.query_async::<Value>(conn)).await {
            Ok(Ok(_)) => {
                if let Some(shared) = self.shared.upgrade() {
                    shared.confirmed(epoch, sent);
                }
                Ok(())
            }
            Ok(Err(error)) => Err(backend(error)),
            Err(_) => Err(Error::Unavailable("the replay cache's heartbeat".into())),
        }
    }

    /// Beats on the connection until it fails, then connects again; ends with the cache.
    async fn run(self, mut epoch: u64, mut conn: MultiplexedConnection) {
        loop {
            tokio::time::sleep(self.every).await;
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            if self.beat(epoch, &mut conn).await.is_ok() {
                continue;
            }
            shared.disconnected();
            match self.connect().await {
                Ok(new) => {
                    epoch = shared.connected(new.clone());
                    conn = new;
                }
                Err(error) => tracing::debug!(%error, "the replay cache cannot reconnect yet"),
            }
        }
    }
}

fn backend(error: redis::RedisError) -> Error {
    Error::Backend(Box::new(error))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use idemkey_core::{Key, Operation, StoredResponse};

    use super::*;

    fn shared() -> Shared {
        Shared {
            entries: ReplayCache::new(1 << 20),
            state: Mutex::default(),
            fresh_until: AtomicU64::new(u64::MAX),
            base: Instant::now(),
            staleness: DEFAULT_STALENESS,
        }
    }

    fn scope() -> Scope {
        Scope::new("a", &Operation::new("op", "v1"), Key::parse(b"k").unwrap())
    }

    /// Keeps a completed record of [`scope`] under `key`, if `generation` is still current.
    fn insert(shared: &Shared, generation: u64, key: &str) {
        let record = Record {
            record_id: idemkey_core::RecordId::new(),
            version: "v1".into(),
            fingerprint: idemkey_core::Fingerprint::builder("POST", "/").body(b""),
            token: 1,
            state: RecordState::Completed(StoredResponse::new(201, "x")),
            request_id: None,
        };
        let until = Instant::now() + MAX_AGE;
        shared.insert(generation, key.into(), scope(), record, until);
    }

    fn kept(shared: &Shared, key: &str) -> bool {
        shared.entries.get(key, &scope()).is_some()
    }

    #[test]
    fn a_change_handled_during_a_fill_keeps_its_copy_out() {
        let shared = shared();
        let generation = shared.lock().generation;
        // The invalidation is handled after the fill's reply, before its insertion.
        shared.invalidate(["other"]);
        insert(&shared, generation, "k");
        assert!(!kept(&shared, "k"));
        let generation = shared.lock().generation;
        insert(&shared, generation, "k");
        assert!(kept(&shared, "k"));
    }

    #[test]
    fn invalidations_drop_their_keys_and_a_null_drops_all() {
        let shared = shared();
        insert(&shared, 0, "k");
        insert(&shared, 0, "j");
        shared.invalidate(["k"]);
        assert!(!kept(&shared, "k"));
        assert!(kept(&shared, "j"));
        shared.invalidate_all();
        assert!(!kept(&shared, "j"));
    }

    #[test]
    fn a_disconnection_empties_the_cache_and_stops_serving() {
        let shared = shared();
        insert(&shared, 0, "k");
        shared.disconnected();
        assert!(!kept(&shared, "k"));
        assert!(!shared.fresh(Instant::now()));
        // A heartbeat of the lost connection confirms nothing.
        shared.confirmed(0, Instant::now());
        assert!(!shared.fresh(Instant::now()));
    }

    #[test]
    fn freshness_lasts_the_staleness_bound_from_the_heartbeat_sent() {
        let shared = shared();
        shared.fresh_until.store(0, Ordering::Release);
        let sent = Instant::now();
        shared.confirmed(0, sent);
        assert!(shared.fresh(sent));
        assert!(!shared.fresh(sent + DEFAULT_STALENESS));
    }
}
