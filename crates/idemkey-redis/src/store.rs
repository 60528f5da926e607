//! The store: each [`Store`] method runs one script of `lua/` on the record's key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemkey_core::{
    ActorCaps, ActorForgotten, Claim, ClaimRequest, DerivedKeys, Error, OwnerId, Record, RecordId,
    Result, SECRET_LEN, Scope, Store, StoredResponse, TryClaim,
};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{FromRedisValue, ScriptInvocation, Value};
use tokio::sync::OnceCell;

use crate::cache::TrackedCache;
use crate::caps::Change;
use crate::durable::Durable;
use crate::error::{Sent, store_error, timed_out};
use crate::keys::{DEFAULT_PREFIX, Keys};
use crate::record::{self, Claimed};
use crate::scripts::scripts;

mod scan;

/// The longest duration sent to a script, in ms (about 34 years): the scripts add times as Lua
/// numbers (doubles), exact only up to 2^53.
const MAX_MS: u64 = 1 << 40;

/// The bound of one operation unless [`RedisStore::with_timeout`] says otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A lease-mode [`Store`] on Redis or Valkey, over any redis-rs async connection: a
/// [`redis::aio::ConnectionManager`], a [`redis::cluster_async::ClusterConnection`], or the
/// [`crate::RedisConnection`] of either that [`RedisStore::connect`] makes.
///
/// Clones share the connection and the cached secret.
#[derive(Clone)]
pub struct RedisStore<C> {
    conn: C,
    pub(crate) keys: Keys,
    timeout: Duration,
    secret: Arc<OnceCell<Arc<[u8]>>>,
    /// What a completion waits for, and the connections it waits on (see
    /// [`crate::RedisOptions::wait_replicas`] and [`crate::RedisOptions::wait_fsync`]).
    durable: Option<Arc<Durable>>,
    /// Completed records kept in the process (see [`crate::RedisOptions::replay_cache`]).
    cache: Option<Arc<TrackedCache>>,
    /// Whether claims name their owner's heartbeat key (see [`Self::with_owner_heartbeats`]).
    owners: bool,
    /// Per-actor caps (see [`RedisStore::with_actor_caps`]).
    pub(crate) caps: ActorCaps,
    /// The caps as the scripts take them (see [`crate::caps::cap_args`]).
    pub(crate) cap_args: [String; 2],
    /// Whether every key is on one server, not spread over a cluster's slots: the record's
    /// scripts then keep its actor's ledger themselves (see [`crate::caps`]).
    pub(crate) one_server: bool,
}

impl<C> std::fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("keys", &self.keys)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A store on `conn`, with keys under [`DEFAULT_PREFIX`] and operations bounded by 5 s.
    pub fn new(conn: C) -> Self {
        Self {
            conn,
            keys: Keys::new(DEFAULT_PREFIX).unwrap_or_else(|_| unreachable!("a valid prefix")),
            timeout: DEFAULT_TIMEOUT,
            secret: Arc::default(),
            durable: None,
            cache: None,
            caps: ActorCaps::new(),
            cap_args: Default::default(),
            owners: false,
            one_server: false,
        }
    }

    /// The same store, told that its connection is to one server, not a cluster: its scripts
    /// may then touch keys of other slots (an actor's ledger beside a record).
    pub(crate) fn on_one_server(mut self) -> Self {
        self.one_server = true;
        self
    }

    /// The same store with owners' heartbeats ([`Store::beat`], behaviour
    /// [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): a heartbeat is a key per owner
    /// (`{prefix}:owner:<id>`) holding until when the owner is alive, and a claim naming an
    /// owner whose heartbeat has lapsed is stale whatever its lease. A standalone server only: the key is in
    /// another slot than the records, which a cluster's scripts cannot read. Without it (the
    /// default of [`Self::new`]; [`Self::connect`] turns it on for a standalone server) a
    /// heartbeat does nothing and claims keep their leases alone.
    #[must_use]
    pub fn with_owner_heartbeats(mut self) -> Self {
        self.owners = true;
        self
    }

    /// The key of `request`'s owner's heartbeat, or `""` when it names none or heartbeats
    /// are off.
    fn owner_key(&self, request: &ClaimRequest) -> String {
        match request.owner {
            Some(owner) if self.owners => self.keys.owner(owner),
            _ => String::new(),
        }
    }

    /// The owner id as the record's fence keeps it (`of`), heartbeats or not: `""` for none.
    fn fence(owner: Option<OwnerId>) -> String {
        owner.map_or_else(String::new, |owner| owner.as_uuid().simple().to_string())
    }

    /// The same store with its keys under `prefix` (`{prefix}:{<digest>}` per record,
    /// `{prefix}:secret`). [`Error::Backend`] if the prefix holds a brace, which would
    /// displace the records' hash tag.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self> {
        self.keys = Keys::new(prefix)?;
        self.secret = Arc::default();
        Ok(self)
    }

    /// The same store with each operation bounded by `timeout` in all: past it, an operation
    /// fails with [`Error::Unavailable`] (a completion: [`Error::OutcomeUnknown`]).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same store, each completion waiting as `durable` says before it returns.
    pub(crate) fn with_durable(mut self, durable: Durable) -> Self {
        self.durable = Some(Arc::new(durable));
        self
    }

    /// The same store with `cache` in front of its lookups and claims.
    pub(crate) fn with_cache(mut self, cache: TrackedCache) -> Self {
        self.cache = Some(Arc::new(cache));
        self
    }

    /// Waits until this store's replay cache has applied every invalidation Redis sent before
    /// now, so that a change made elsewhere is seen by the next lookup. Returns at once without
    /// a replay cache. For tests and tools: requests need no such call, the invalidations
    /// arrive by themselves within microseconds.
    pub async fn sync_replay_cache(&self) -> Result<()> {
        match &self.cache {
            Some(cache) => cache.sync().await,
            None => Ok(()),
        }
    }

    /// The completed record of `scope`, at Redis key `key`, from the replay cache, if there
    /// is a fresh copy.
    fn cached(&self, key: &str, scope: &Scope) -> Option<Record> {
        let record = self.cache.as_ref()?.get(key, scope)?;
        Some(Record::clone(&record))
    }

    /// After the server answered with `record`: if it is completed, fills the replay cache
    /// with it in the background, over the cache's tracking connection.
    fn fill_later(&self, key: String, scope: &Scope, record: &Record) {
        let Some(cache) = &self.cache else {
            return;
        };
        if !matches!(record.state, idemkey_core::RecordState::Completed(_)) {
            return;
        }
        let (cache, scope, timeout) = (Arc::clone(cache), scope.clone(), self.timeout);
        let invocation = self.scoped_at(&scripts().cached, key.clone(), &scope);
        tokio::spawn(async move { cache.fill(key, scope, invocation, timeout).await });
    }

    /// Drops the scope's copy from the replay cache: this process changed the record.
    fn uncache(&self, scope: &Scope) {
        if let Some(cache) = &self.cache {
            cache.forget(&self.keys.record(scope));
        }
    }

    /// Runs the completion `invocation`, then waits until it is as durable as asked, on a
    /// connection of its own (see [`crate::durable`]).
    ///
    /// The record reads as in flight until the wait is done and this marks it so (or, if this
    /// process dies meanwhile, until the longest it could have taken).
    async fn complete_durably(
        &self,
        durable: &Durable,
        (claim, invocation): (&Claim, &ScriptInvocation<'_>),
    ) -> Result<()> {
        let mut conn = durable.take().await?;
        if !record::done(&self.run_on(&mut conn, invocation, Sent::Commit).await?)? {
            return Err(Error::Fenced);
        }
        // A failed or short wait is not the completion's failure: it is on the master, and a
        // retried completion would only find it done.
        self.wait_on(durable, conn, "completion").await;
        let mark = self.held(&scripts().durable, claim);
        if let Err(error) = self.run(&mark, Sent::Harmless).await {
            tracing::warn!(%error, "a completion could not be marked done waiting: it is answered from once its wait's time is up");
        }
        Ok(())
    }

    /// Waits on `conn` after `what` was written on it, then gives the connection back. A
    /// short or failed wait is logged: the write stands on the master.
    async fn wait_on(&self, durable: &Durable, mut conn: MultiplexedConnection, what: &str) {
        match durable.wait(&mut conn, self.timeout).await {
            Ok(true) => durable.give_back(conn),
            Ok(false) => {
                tracing::warn!(
                    what,
                    "a write was not made durable as asked within the wait"
                )
            }
            Err(error) => tracing::warn!(%error, what, "waiting after a write failed"),
        }
    }

    /// Runs the claim `invocation`; with waits, on a connection of its own, and a fresh claim
    /// waits there before it returns (see [`crate::durable`]).
    async fn run_claim(&self, invocation: &ScriptInvocation<'_>) -> Result<Claimed> {
        let Some(durable) = &self.durable else {
            return record::claimed(self.run(invocation, Sent::Harmless).await?);
        };
        let mut conn = durable.take().await?;
        let claimed = record::claimed(self.run_on(&mut conn, invocation, Sent::Harmless).await?)?;
        match claimed {
            Claimed::Token(_) => self.wait_on(durable, conn, "claim").await,
            Claimed::Existing(_) | Claimed::Refused(_) => durable.give_back(conn),
        }
        Ok(claimed)
    }

    /// How long a completer may hold its completion waiting (ms), `0` without waits: the
    /// wait's own timeout and the bound of its reply.
    fn completion_wait(&self) -> u64 {
        self.durable
            .as_ref()
            .map_or(0, |durable| ms(durable.timeout() + self.timeout))
    }

    /// After a forget that deleted the record or not: takes it out of its actor's ledger, if
    /// the forget script could not (see [`Self::forget_entry`]).
    async fn forgotten(&self, scope: &Scope, deleted: bool) -> Result<bool> {
        if deleted {
            self.forget_entry(scope, &self.keys.record(scope)).await;
        }
        Ok(deleted)
    }

    /// The connection, for the application's own commands.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The Redis key of a scope's record (`{prefix}:{<hex digest>}`), for tools and tests.
    pub fn record_key(&self, scope: &Scope) -> String {
        self.keys.record(scope)
    }

    /// Runs a script invocation, bounded by the store's timeout.
    pub(crate) async fn run(&self, invocation: &ScriptInvocation<'_>, sent: Sent) -> Result<Value> {
        self.run_on(&mut self.conn.clone(), invocation, sent).await
    }

    /// Runs a script invocation on `conn`, bounded by the store's timeout.
    async fn run_on<K: ConnectionLike + Send>(
        &self,
        conn: &mut K,
        invocation: &ScriptInvocation<'_>,
        sent: Sent,
    ) -> Result<Value> {
        let reply = invocation.invoke_async::<Value>(conn);
        match tokio::time::timeout(self.timeout, reply).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(store_error(error, sent)),
            Err(_) => Err(timed_out(sent, self.timeout)),
        }
    }

    /// An invocation of `script` on the scope's key, with the scope as its first three
    /// arguments: every script compares them with the hash's.
    fn scoped<'a>(&self, script: &'a redis::Script, scope: &Scope) -> ScriptInvocation<'a> {
        self.scoped_at(script, self.keys.record(scope), scope)
    }

    /// [`Self::scoped`] with the scope's key already digested (see [`Keys::record`]).
    fn scoped_at<'a>(
        &self,
        script: &'a redis::Script,
        key: String,
        scope: &Scope,
    ) -> ScriptInvocation<'a> {
        let mut invocation = script.key(key);
        invocation
            .arg(scope.actor.as_bytes())
            .arg(scope.operation.as_bytes())
            .arg(scope.key.as_str().as_bytes());
        invocation
    }

    /// An invocation of a fenced script: the scope, then the claim's record id and token.
    fn held<'a>(&self, script: &'a redis::Script, claim: &Claim) -> ScriptInvocation<'a> {
        let mut invocation = self.scoped(script, &claim.scope);
        invocation
            .arg(claim.record_id.as_bytes().as_slice())
            .arg(claim.token);
        invocation
    }

    /// Runs a fenced script: `Fenced` unless it reports done.
    async fn fenced(&self, invocation: &ScriptInvocation<'_>, sent: Sent) -> Result<()> {
        if record::done(&self.run(invocation, sent).await?)? {
            Ok(())
        } else {
            Err(Error::Fenced)
        }
    }

    /// Reads the secret, storing `candidate` first if there is none: one `SET … NX GET`, so
    /// whichever process sets it first, every process reads the same.
    async fn load_secret(&self) -> Result<Arc<[u8]>> {
        let candidate = DerivedKeys::generate_secret()?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.keys.secret())
            .arg(candidate.as_slice())
            .arg("NX")
            .arg("GET");
        let mut conn = self.conn.clone();
        let reply = tokio::time::timeout(self.timeout, cmd.query_async::<Value>(&mut conn))
            .await
            .map_err(|_| timed_out(Sent::Harmless, self.timeout))?
            .map_err(|e| store_error(e, Sent::Harmless))?;
        let secret = match reply {
            Value::Nil => candidate.to_vec(),
            other => Vec::<u8>::from_redis_value(other)
                .map_err(|e| Error::Backend(format!("the stored secret: {e}").into()))?,
        };
        if secret.len() < SECRET_LEN {
            return Err(Error::Backend(
                format!("the stored secret has {} bytes", secret.len()).into(),
            ));
        }
        Ok(secret.into())
    }
}

/// Milliseconds for a script, capped at [`MAX_MS`].
pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).map_or(MAX_MS, |ms| ms.min(MAX_MS))
}

impl<C> Store for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        // One digest of the scope serves the cache, the script and the fill.
        let key = self.keys.record(scope);
        if let Some(record) = self.cached(&key, scope) {
            return Ok(Some(record));
        }
        let invocation = self.scoped_at(&scripts().lookup, key.clone(), scope);
        let found = record::optional_record(self.run(&invocation, Sent::Harmless).await?)?;
        if let Some(record) = &found {
            self.fill_later(key, scope, record);
        }
        Ok(found)
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        let key = self.keys.record(&request.scope);
        if let Some(record) = self.cached(&key, &request.scope) {
            return Ok(TryClaim::Existing(record));
        }
        // Under caps in a cluster, checked before the claim: a refused request creates
        // nothing. A retry whose record exists is answered from it all the same. On one
        // server the claim itself checks them, after its own lookup.
        if let Err(refused) = self
            .admit(&request.scope, &key, request.lease + request.retention)
            .await
        {
            return match self.lookup(&request.scope).await? {
                Some(record) if matches!(refused, Error::ActorCap { .. }) => {
                    Ok(TryClaim::Existing(record))
                }
                _ => Err(refused),
            };
        }
        let acquired = Instant::now();
        let record_id = RecordId::new();
        let mut invocation = self.scoped_at(&scripts().claim, key.clone(), &request.scope);
        invocation
            .arg(record_id.as_bytes().as_slice())
            .arg(request.operation.version().as_bytes())
            .arg(request.fingerprint.as_bytes().as_slice())
            .arg(ms(request.lease))
            .arg(ms(request.retention))
            .arg(if request.request_id.is_some() {
                "1"
            } else {
                "0"
            })
            .arg(request.request_id.as_deref().unwrap_or("").as_bytes())
            .arg(self.owner_key(request))
            .arg(Self::fence(request.owner));
        self.claim_ledger(&mut invocation, &request.scope.actor);
        match self.run_claim(&invocation).await? {
            Claimed::Token(token) => Ok(TryClaim::Claimed(
                request.grant(record_id, token, acquired, None),
            )),
            Claimed::Existing(record) => {
                self.fill_later(key, &request.scope, &record);
                Ok(TryClaim::Existing(record))
            }
            Claimed::Refused(usage) => Err(self.refusal(&usage)),
        }
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        let acquired = Instant::now();
        let mut invocation = self.scoped(&scripts().reclaim, &request.scope);
        invocation
            .arg(seen.record_id.as_bytes().as_slice())
            .arg(seen.token)
            .arg(ms(request.lease))
            .arg(ms(request.retention))
            .arg(self.owner_key(request))
            .arg(Self::fence(request.owner));
        self.name_ledger(&mut invocation, &request.scope.actor, false);
        let token = record::token(&self.run(&invocation, Sent::Harmless).await?)?;
        if token.is_some() {
            let life = request.lease + request.retention;
            self.note(&request.scope, Change::Renewed { life }).await;
        }
        Ok(token.map(|token| request.grant(seen.record_id, token, acquired, Some(seen))))
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let mut invocation = self.held(&scripts().complete, claim);
        invocation
            .arg(response.encode())
            .arg(ms(claim.retention))
            .arg(self.completion_wait())
            .arg(Self::fence(claim.owner));
        self.name_ledger(&mut invocation, &claim.scope.actor, false);
        match &self.durable {
            Some(durable) => self.complete_durably(durable, (claim, &invocation)).await,
            None => self.fenced(&invocation, Sent::Commit).await,
        }?;
        let bytes = response.encoded_len() as u64;
        let change = Change::Stored {
            retention: claim.retention,
            bytes,
        };
        self.note(&claim.scope, change).await;
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let mut invocation = self.held(&scripts().release, claim);
        invocation
            .arg(ms(claim.retention))
            .arg(Self::fence(claim.owner));
        self.name_ledger(&mut invocation, &claim.scope.actor, false);
        self.fenced(&invocation, Sent::Harmless).await?;
        let life = claim.retention;
        self.note(&claim.scope, Change::Renewed { life }).await;
        Ok(())
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        let mut invocation = self.held(&scripts().discard, claim);
        invocation.arg(Self::fence(claim.owner));
        self.name_ledger(&mut invocation, &claim.scope.actor, false);
        self.fenced(&invocation, Sent::Harmless).await?;
        self.note(&claim.scope, Change::Gone).await;
        Ok(())
    }

    /// Nothing to wait for: a fresh claim waits before it is granted, whatever its
    /// [`idemkey_core::ClaimFlush`] (`durable.rs`).
    async fn flush_claim(&self, _claim: &Claim) -> Result<()> {
        Ok(())
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        let acquired = Instant::now();
        let mut invocation = self.held(&scripts().extend, claim);
        invocation
            .arg(ms(claim.lease))
            .arg(ms(claim.retention))
            .arg(Self::fence(claim.owner));
        self.name_ledger(&mut invocation, &claim.scope.actor, false);
        self.fenced(&invocation, Sent::Harmless).await?;
        claim.acquired = acquired;
        let life = claim.lease + claim.retention;
        self.note(&claim.scope, Change::Renewed { life }).await;
        Ok(())
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        let mut invocation = self.scoped(&scripts().forget, scope);
        self.name_ledger(&mut invocation, &scope.actor, true);
        let forgotten = self.run(&invocation, Sent::Harmless).await;
        // Whatever the reply: a forget that failed after its deletion must not leave a copy.
        self.uncache(scope);
        self.forgotten(scope, record::done(&forgotten?)?).await
    }

    /// One script, so that a forget naming a version never deletes another version's record.
    async fn forget_version(&self, scope: &Scope, version: &str) -> Result<bool> {
        let mut invocation = self.scoped(&scripts().forget, scope);
        invocation.arg(version.as_bytes());
        self.name_ledger(&mut invocation, &scope.actor, true);
        let forgotten = self.run(&invocation, Sent::Harmless).await;
        self.uncache(scope);
        self.forgotten(scope, record::done(&forgotten?)?).await
    }

    /// One `SCAN` pass over the store's record keys, on every master of a cluster: Redis
    /// keeps no index of an actor's records (see `store/scan.rs` for what it costs).
    async fn forget_actor(&self, actor: &str) -> Result<ActorForgotten> {
        self.forget_actor_by_scan(actor).await
    }

    /// Nothing to do: every record's key carries its expiry (`PEXPIREAT`), and Redis deletes
    /// it then by itself, so there is never an expired record to sweep. Always `Ok(0)`.
    async fn sweep(&self, _batch: u32) -> Result<u64> {
        Ok(0)
    }

    /// Always kept: see [`RedisStore::with_actor_caps`].
    fn with_caps(self, caps: ActorCaps) -> Result<Self> {
        Ok(self.with_actor_caps(caps))
    }

    /// The claim script returns the live record it meets, at the cost of a lookup: a lookup
    /// first would only add a round trip to every first request.
    fn lookup_first(&self) -> bool {
        false
    }

    async fn beat(&self, owner: idemkey_core::OwnerId, grace: Duration) -> Result<()> {
        if !self.owners {
            return Ok(());
        }
        let mut invocation = scripts().beat.key(self.keys.owner(owner));
        invocation.key(self.keys.beats());
        invocation.arg(ms(grace));
        self.run(&invocation, Sent::Harmless).await?;
        Ok(())
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        self.secret
            .get_or_try_init(|| self.load_secret())
            .await
            .cloned()
    }
}
