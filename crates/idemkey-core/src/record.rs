//! Records, claims and what a claim asks for (behaviour [§1](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#1-words-and-guarantees), [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions), [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)).

use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::{Fingerprint, Key, Operation, Scope, StoredResponse};

/// Default lease of a lease-mode claim: 30 seconds.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default retention of a completed record: 24 hours.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// A record's id: the same across lease takeovers, new after retention expiry (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordId(Uuid);

impl RecordId {
    /// A fresh random id.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The id's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// Rebuilds an id from stored bytes; `None` unless there are exactly 16.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        Uuid::from_slice(bytes).ok().map(Self)
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for RecordId {
    fn default() -> Self {
        Self::new()
    }
}

/// A process's identity as the owner of its claims (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): made at random when
/// the process starts, so a restarted process is a new owner. A claim that names its owner
/// may be taken over as soon as the owner's heartbeat ([`crate::Store::beat`]) has lapsed,
/// without waiting for the claim's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OwnerId(Uuid);

impl OwnerId {
    /// A fresh random owner.
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The id's 16 bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for OwnerId {
    fn default() -> Self {
        Self::new()
    }
}

impl From<Uuid> for RecordId {
    fn from(uuid: Uuid) -> Self {
        Self(uuid)
    }
}

/// The state of a stored record, as seen with the store's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// An executor holds the claim; `lease_remaining` is zero once the lease has expired.
    InFlight {
        /// Time left on the lease, measured by the store's clock.
        lease_remaining: Duration,
    },
    /// The executor gave the claim back without a stored response; a retry executes again
    /// under the same record id, so with the same derived keys.
    Released,
    /// The stored response, replayed to every equal retry.
    Completed(StoredResponse),
}

/// A live (unexpired) record of one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's id.
    pub record_id: RecordId,
    /// The operation version that wrote the record.
    pub version: String,
    /// The fingerprint of the request that created the record.
    pub fingerprint: Fingerprint,
    /// The current fencing token.
    pub token: i64,
    /// The record's state.
    pub state: RecordState,
    /// The request id of the request that created the record, for tracing replays.
    pub request_id: Option<String>,
}

/// What a request asks of the store: the scope, what identifies the request, and its times.
#[derive(Clone, Debug)]
pub struct ClaimRequest {
    /// The record's identity.
    pub scope: Scope,
    /// The operation, whose version is stored and compared.
    pub operation: Operation,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The lease a claim gets. Defaults to 30 s.
    pub lease: Duration,
    /// How long a record is kept after completion. Defaults to 24 h.
    pub retention: Duration,
    /// The request id, kept in the record.
    pub request_id: Option<String>,
    /// The process that will execute under the claim, if it keeps a heartbeat
    /// ([`crate::Store::beat`]): its claim is then stale once either its lease or its owner's
    /// heartbeat has run out. Defaults to `None`: the lease alone.
    pub owner: Option<OwnerId>,
    /// When a granted claim must be on disk. Defaults to [`ClaimFlush::OnClaim`].
    pub flush: ClaimFlush,
}

/// When a granted claim must be on disk (behaviour
/// [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
///
/// A claim lost in a power cut costs nothing by itself: the retry claims afresh. It costs a
/// duplicate only where an effect of the execution outlives the cut without the claim: an
/// effect outside the store's database (a call under the record's derived keys, a forwarded
/// request), since the retry's fresh claim gets a new record id, so new derived keys. An
/// effect committed in the store's own database flushes every earlier write of it with its
/// commit (one WAL), the claim included, so it needs no flush of the claim's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimFlush {
    /// On disk when [`crate::Store::try_claim`] or [`crate::Store::reclaim`] returns it: for a
    /// caller that may pass the derived keys out, or forward the request, at once.
    #[default]
    OnClaim,
    /// Committed, maybe not yet on disk, when it is granted: the caller awaits
    /// [`crate::Store::flush_claim`] before the first effect outside the store's database.
    /// A store that cannot defer the flush makes the claim durable all the same.
    Deferred,
}

/// The longest request id a record keeps, in bytes (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)): a client's
/// `X-Request-Id` is otherwise bounded only by the server's header limit, and the record
/// keeps it for the whole retention. Longer ids are cut.
pub const MAX_REQUEST_ID_LEN: usize = 128;

impl ClaimRequest {
    /// A request with the default lease and retention.
    pub fn new(
        actor: impl Into<String>,
        operation: Operation,
        key: Key,
        fingerprint: Fingerprint,
    ) -> Self {
        Self {
            scope: Scope::new(actor, &operation, key),
            operation,
            fingerprint,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            request_id: None,
            owner: None,
            flush: ClaimFlush::OnClaim,
        }
    }

    /// Names the owner whose heartbeat keeps the claim alive, besides its lease.
    #[must_use]
    pub fn owner(mut self, owner: OwnerId) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Sets when a granted claim must be on disk.
    #[must_use]
    pub fn flush(mut self, flush: ClaimFlush) -> Self {
        self.flush = flush;
        self
    }

    /// Sets the lease.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets the retention.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Sets the request id kept in the record, cut to [`MAX_REQUEST_ID_LEN`] bytes (at a
    /// character boundary): it comes from the client and is kept for the whole retention.
    #[must_use]
    pub fn request_id(mut self, request_id: impl Into<String>) -> Self {
        let mut request_id = request_id.into();
        let mut end = request_id.len().min(MAX_REQUEST_ID_LEN);
        while !request_id.is_char_boundary(end) {
            end -= 1;
        }
        request_id.truncate(end);
        self.request_id = Some(request_id);
        self
    }

    /// Whether `record` was written by the same request: equal fingerprint, accepted version.
    pub fn matches(&self, record: &Record) -> bool {
        record.fingerprint == self.fingerprint && self.operation.accepts_version(&record.version)
    }

    /// The claim a store grants this request, for store implementations: record `record_id`
    /// at fencing `token`, its lease counted from `acquired`; `seen` is the record claimed
    /// again (released, or in flight with an expired lease: a takeover), `None` for a new one.
    pub fn grant(
        &self,
        record_id: RecordId,
        token: i64,
        acquired: Instant,
        seen: Option<&Record>,
    ) -> Claim {
        Claim {
            scope: self.scope.clone(),
            record_id,
            token,
            lease: self.lease,
            retention: self.retention,
            acquired,
            taken_over: seen.is_some_and(|r| matches!(r.state, RecordState::InFlight { .. })),
            fresh: seen.is_none(),
            owner: self.owner,
        }
    }
}

/// The right to execute a scope, held until completed, released or taken over.
#[derive(Clone, Debug)]
pub struct Claim {
    /// The scope claimed.
    pub scope: Scope,
    /// The record's id, the root of derived keys.
    pub record_id: RecordId,
    /// The fencing token: completion and release succeed only while it is current.
    pub token: i64,
    /// The lease granted.
    pub lease: Duration,
    /// The retention applied when the record is completed or released.
    pub retention: Duration,
    /// The local instant just before the lease was granted or last extended.
    pub acquired: Instant,
    /// Whether this claim took over an expired lease.
    pub taken_over: bool,
    /// Whether this claim created its record, rather than claiming a released or expired
    /// one again: only a fresh record may be discarded (see [`crate::Store::discard`]).
    pub fresh: bool,
    /// The owner the claim names ([`ClaimRequest::owner`]), part of its fence: a grant
    /// (record id and token) given again to another owner, after a takeover that a failover
    /// lost, fences this claim off too, so that two holders of one token never complete,
    /// release or extend each other's claims.
    pub owner: Option<OwnerId>,
}

impl Claim {
    /// The local instant after which the holder stops trusting its lease, `margin` before
    /// it would expire by the holder's own clock (behaviour [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)).
    pub fn trusted_until(&self, margin: Duration) -> Instant {
        self.acquired + self.lease.saturating_sub(margin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_round_trip_and_differ() {
        let id = RecordId::new();
        assert_eq!(RecordId::from_slice(id.as_bytes()), Some(id));
        assert_ne!(RecordId::new(), id);
        assert_eq!(RecordId::from_slice(&[0; 3]), None);
    }

    #[test]
    fn a_request_id_is_cut_at_a_character_boundary() {
        let request = ClaimRequest::new(
            "a",
            Operation::new("op", "v1"),
            crate::Key::parse(b"k").unwrap(),
            Fingerprint::builder("POST", "/").body(b""),
        );
        let short = request.clone().request_id("abc");
        assert_eq!(short.request_id.as_deref(), Some("abc"));
        // 127 ASCII bytes, then a two-byte character across the bound: cut before it.
        let id = format!(
            "{}é{}",
            "x".repeat(MAX_REQUEST_ID_LEN - 1),
            "y".repeat(1000)
        );
        let cut = request.request_id(id).request_id.unwrap();
        assert_eq!(cut, "x".repeat(MAX_REQUEST_ID_LEN - 1));
    }
}
