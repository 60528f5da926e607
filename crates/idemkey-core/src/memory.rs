//! An in-memory store: for tests, examples and single-process services that may forget.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{
    ActorForgotten, Claim, ClaimRequest, DerivedKeys, Error, Fingerprint, OwnerId, Record,
    RecordId, RecordState, Result, Scope, Store, StoredResponse, TryClaim,
};

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now_ms(&self) -> u64;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `ms`.
    pub fn at(ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(ms)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Debug)]
enum RowState {
    InFlight { lease_until: u64 },
    Released,
    Completed(StoredResponse),
}

#[derive(Clone, Debug)]
struct Row {
    record_id: RecordId,
    version: String,
    fingerprint: Fingerprint,
    token: i64,
    state: RowState,
    expires_at: u64,
    request_id: Option<String>,
    owner: Option<OwnerId>,
}

/// An in-memory [`Store`]. Clones share the same records. Records do not survive the process.
#[derive(Clone)]
pub struct MemoryStore {
    rows: Arc<Mutex<HashMap<Scope, Row>>>,
    /// Each owner's heartbeat: alive until then, by `clock`, and its grace; and since when
    /// owners have beaten without a gap.
    owners: Arc<Mutex<Owners>>,
    clock: Arc<dyn Clock>,
    /// Lives as long as the records: both are gone with the process.
    secret: Arc<std::sync::OnceLock<Arc<[u8]>>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(SystemClock)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

/// The owners' heartbeats, as the SQL stores keep them (behaviour §8a).
#[derive(Default)]
struct Owners {
    /// Alive until (ms) and grace (ms), per owner.
    beats: HashMap<OwnerId, (u64, u64)>,
    /// The latest beat of any owner (ms).
    last_beat: u64,
    /// Since when beats have come without a gap of more than two fifths of a grace: an
    /// owner is lapsed only once this is a whole grace old.
    since: u64,
}

impl Owners {
    fn beat(&mut self, owner: OwnerId, now: u64, grace: u64) {
        if now.saturating_sub(self.last_beat) > grace * 2 / 5 {
            self.since = now;
        }
        self.last_beat = self.last_beat.max(now);
        // Never backwards, as the SQL stores' upserts.
        let before = self.beats.get(&owner).map_or(0, |&(until, _)| until);
        let until = before.max(now.saturating_add(grace));
        self.beats.insert(owner, (until, grace));
    }

    /// Whether `owner` is known and lapsed at `now`: past its mark, the run a grace old, and
    /// unbroken now (a beat within two fifths of the grace).
    fn lapsed(&self, owner: OwnerId, now: u64) -> bool {
        self.beats.get(&owner).is_some_and(|&(alive_until, grace)| {
            alive_until <= now
                && self.since.saturating_add(grace) <= now
                && self.last_beat.saturating_add(grace * 2 / 5) > now
        })
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store on the given clock.
    pub fn with_clock(clock: impl Clock) -> Self {
        Self {
            rows: Arc::default(),
            owners: Arc::default(),
            clock: Arc::new(clock),
            secret: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Scope, Row>> {
        // A panic while holding the lock cannot leave a row half-written: every mutation
        // below is a single assignment, so the data is still consistent.
        self.rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// When `row`'s claim runs out: its lease, or its owner's heartbeat if that lapsed.
    fn claim_until(&self, row: &Row, lease_until: u64, now: u64) -> u64 {
        let Some(owner) = row.owner else {
            return lease_until;
        };
        let owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        // No heartbeat (a wrapper that never forwarded one): the lease alone.
        if owners.lapsed(owner, now) {
            0
        } else {
            lease_until
        }
    }

    fn record(&self, row: &Row, now: u64) -> Record {
        let state = match &row.state {
            RowState::InFlight { lease_until } => RecordState::InFlight {
                lease_remaining: Duration::from_millis(
                    self.claim_until(row, *lease_until, now).saturating_sub(now),
                ),
            },
            RowState::Released => RecordState::Released,
            RowState::Completed(response) => RecordState::Completed(response.clone()),
        };
        Record {
            record_id: row.record_id,
            version: row.version.clone(),
            fingerprint: row.fingerprint,
            token: row.token,
            state,
            request_id: row.request_id.clone(),
        }
    }

    fn claim_row(
        request: &ClaimRequest,
        row: &mut Row,
        now: u64,
        seen: Option<&RowState>,
    ) -> Claim {
        let lease_until = now.saturating_add(ms(request.lease));
        row.state = RowState::InFlight { lease_until };
        row.expires_at = lease_until.saturating_add(ms(request.retention));
        row.owner = request.owner;
        Claim {
            scope: request.scope.clone(),
            record_id: row.record_id,
            token: row.token,
            lease: request.lease,
            retention: request.retention,
            acquired: Instant::now(),
            taken_over: matches!(seen, Some(RowState::InFlight { .. })),
            fresh: seen.is_none(),
            owner: request.owner,
        }
    }

    /// The row `claim` still holds, in flight under its token and owner.
    fn held<'a>(rows: &'a mut HashMap<Scope, Row>, claim: &Claim) -> Result<&'a mut Row> {
        match rows.get_mut(&claim.scope) {
            Some(row)
                if row.record_id == claim.record_id
                    && row.token == claim.token
                    && row.owner == claim.owner
                    && matches!(row.state, RowState::InFlight { .. }) =>
            {
                Ok(row)
            }
            _ => Err(Error::Fenced),
        }
    }
}

impl Store for MemoryStore {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        let now = self.clock.now_ms();
        let rows = self.lock();
        Ok(rows
            .get(scope)
            .filter(|row| row.expires_at > now)
            .map(|row| self.record(row, now)))
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        if let Some(row) = rows.get(&request.scope).filter(|row| row.expires_at > now) {
            return Ok(TryClaim::Existing(self.record(row, now)));
        }
        let mut row = Row {
            record_id: RecordId::new(),
            version: request.operation.version().to_owned(),
            fingerprint: request.fingerprint,
            token: 1,
            state: RowState::Released,
            expires_at: 0,
            request_id: request.request_id.clone(),
            owner: request.owner,
        };
        let claim = Self::claim_row(request, &mut row, now, None);
        rows.insert(request.scope.clone(), row);
        Ok(TryClaim::Claimed(claim))
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        // An expired record is absent, as in the SQL stores: it gets a new id, never revived.
        let Some(row) = rows
            .get_mut(&request.scope)
            .filter(|row| row.expires_at > now)
        else {
            return Ok(None);
        };
        let reclaimable = match row.state {
            RowState::Released => true,
            RowState::InFlight { lease_until } => self.claim_until(row, lease_until, now) <= now,
            RowState::Completed(_) => false,
        };
        if row.record_id != seen.record_id || row.token != seen.token || !reclaimable {
            return Ok(None);
        }
        let seen = row.state.clone();
        row.token += 1;
        Ok(Some(Self::claim_row(request, row, now, Some(&seen))))
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        let row = Self::held(&mut rows, claim)?;
        row.state = RowState::Completed(response.clone());
        row.expires_at = now.saturating_add(ms(claim.retention));
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        let row = Self::held(&mut rows, claim)?;
        row.state = RowState::Released;
        row.expires_at = now.saturating_add(ms(claim.retention));
        Ok(())
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        let mut rows = self.lock();
        Self::held(&mut rows, claim)?;
        rows.remove(&claim.scope);
        Ok(())
    }

    /// Nothing to wait for: the memory store keeps nothing across a crash.
    async fn flush_claim(&self, _claim: &Claim) -> Result<()> {
        Ok(())
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        let acquired = Instant::now();
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        let row = Self::held(&mut rows, claim)?;
        let lease_until = now.saturating_add(ms(claim.lease));
        row.state = RowState::InFlight { lease_until };
        row.expires_at = lease_until.saturating_add(ms(claim.retention));
        claim.acquired = acquired;
        Ok(())
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        Ok(self.lock().remove(scope).is_some())
    }

    async fn forget_version(&self, scope: &Scope, version: &str) -> Result<bool> {
        let mut rows = self.lock();
        if rows.get(scope).is_some_and(|row| row.version == version) {
            rows.remove(scope);
            return Ok(true);
        }
        Ok(false)
    }

    async fn forget_actor(&self, actor: &str) -> Result<ActorForgotten> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        let before = rows.len();
        rows.retain(|scope, row| {
            let gone = row.expires_at <= now || matches!(row.state, RowState::Completed(_));
            scope.actor != actor || !gone
        });
        let kept = rows.keys().filter(|scope| scope.actor == actor).count();
        Ok(ActorForgotten {
            forgotten: (before - rows.len()) as u64,
            kept: kept as u64,
        })
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        let now = self.clock.now_ms();
        let mut rows = self.lock();
        let expired: Vec<Scope> = rows
            .iter()
            .filter(|(_, row)| row.expires_at <= now)
            .map(|(scope, _)| scope.clone())
            .take(batch as usize)
            .collect();
        for scope in &expired {
            rows.remove(scope);
        }
        Ok(expired.len() as u64)
    }

    async fn beat(&self, owner: OwnerId, grace: Duration) -> Result<()> {
        let now = self.clock.now_ms();
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.beat(owner, now, ms(grace));
        Ok(())
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        if let Some(secret) = self.secret.get() {
            return Ok(secret.clone());
        }
        let made: Arc<[u8]> = Arc::new(DerivedKeys::generate_secret()?);
        Ok(self.secret.get_or_init(|| made).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Key, Operation};

    crate::store_conformance_suite!(async { MemoryStore::new() });

    #[tokio::test]
    async fn manual_clock_moves_leases() {
        let clock = ManualClock::at(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let key: Key = "k".parse().unwrap();
        let fp = Fingerprint::builder("POST", "/").body(b"");
        let req = ClaimRequest::new("a", Operation::new("op", "v1"), key, fp)
            .lease(Duration::from_secs(10));
        let TryClaim::Claimed(_) = store.try_claim(&req).await.unwrap() else {
            panic!()
        };
        let alive = store.lookup(&req.scope).await.unwrap().unwrap();
        assert_eq!(
            alive.state,
            RecordState::InFlight {
                lease_remaining: Duration::from_secs(10)
            }
        );
        clock.advance(Duration::from_secs(11));
        let dead = store.lookup(&req.scope).await.unwrap().unwrap();
        assert_eq!(
            dead.state,
            RecordState::InFlight {
                lease_remaining: Duration::ZERO
            }
        );
    }

    /// A record past its retention is absent, even to a reclaim that read it while it was
    /// live: it gets a new record id (behaviour [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)), as in the SQL stores. Found by reading
    /// the deterministic simulation's histories.
    #[tokio::test]
    async fn an_expired_record_is_not_reclaimed_under_its_old_id() {
        let clock = ManualClock::at(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let key: Key = "k".parse().unwrap();
        let fp = Fingerprint::builder("POST", "/").body(b"");
        let req = ClaimRequest::new("a", Operation::new("op", "v1"), key, fp)
            .lease(Duration::from_secs(10))
            .retention(Duration::from_secs(10));
        let TryClaim::Claimed(_) = store.try_claim(&req).await.unwrap() else {
            panic!()
        };
        let seen = store.lookup(&req.scope).await.unwrap().unwrap();
        clock.advance(Duration::from_secs(21));
        assert!(store.reclaim(&req, &seen).await.unwrap().is_none());
    }
}
