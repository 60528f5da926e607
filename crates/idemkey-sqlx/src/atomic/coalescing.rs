//! In-process coalescing of atomic-mode duplicates (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode): the losers wait for the
//! winner's answer), on core's [`Turns`].
//!
//! A request whose scope another request of the same store is already claiming waits for that
//! one to end instead of queueing for SQLite's writer or a PostgreSQL row lock only to find
//! the record there; one that arrives once the other has its turn does not even read the
//! record first (nor take a connection for it). Any request of the scope waits, not only an
//! exact duplicate: the committed record decides a different request too (`key-reused`).
//! When the first one commits, it hands on its record (as committed) to its turn's followers, and the
//! waiting ones answer from it as from a lookup; when it ends without a record, they look
//! again (and the next one claims). A lookup's result is never handed on: each request reads
//! for itself, so no answer predates its request. The database stays the arbiter: across
//! processes and instances, and whenever the wait is cut short.

use std::sync::Arc;

use idemkey_core::{
    Claim, ClaimRequest, Fingerprint, Follower, OwnTurn, Record, RecordState, StoredResponse, Turns,
};

/// What a request that duplicates were waiting for hands on to them, when it ends with
/// an answer for them (otherwise its turn ends without a value and they look again).
#[derive(Clone, Debug)]
pub(crate) enum HandedOn {
    /// The record it committed, as committed.
    Committed(Arc<Record>),
    /// Its claim gave up waiting on the database (its bound, or the cap on waiting
    /// claims): they answer in flight with it.
    InFlight,
}

/// The scopes this store's requests are claiming.
pub(crate) type LocalClaims = Turns<HandedOn>;

/// What a duplicate waits on: the request of its scope that has the turn.
pub(crate) type Leader = Follower<HandedOn>;

/// A request's turn at claiming a scope, with what the record it commits will carry; dropping
/// it wakes the duplicates.
#[derive(Debug)]
pub(crate) struct LocalTurn {
    turn: OwnTurn<HandedOn>,
    version: String,
    fingerprint: Fingerprint,
    request_id: Option<String>,
}

impl LocalTurn {
    /// `turn`, taken for `request`.
    pub(crate) fn new(turn: OwnTurn<HandedOn>, request: &ClaimRequest) -> Box<Self> {
        Box::new(Self {
            turn,
            version: request.operation.version().to_owned(),
            fingerprint: request.fingerprint,
            request_id: request.request_id.clone(),
        })
    }

    /// The claim took over `record`: what it commits keeps that record's version, fingerprint
    /// and request id, not this request's.
    pub(crate) fn adopt(&mut self, record: &Record) {
        self.version.clone_from(&record.version);
        self.fingerprint = record.fingerprint;
        self.request_id.clone_from(&record.request_id);
    }

    /// Tells the waiting duplicates that this claim waited on the database past the bound.
    pub(crate) fn in_flight(&self) {
        self.turn.hand_on(HandedOn::InFlight);
    }

    /// Hands the record this turn's claim committed, with `response` stored, to the waiting
    /// duplicates. Call only once the commit is acknowledged.
    pub(crate) fn hand_on(&self, claim: &Claim, response: &StoredResponse) {
        let record = Record {
            record_id: claim.record_id,
            version: self.version.clone(),
            fingerprint: self.fingerprint,
            token: claim.token,
            state: RecordState::Completed(response.clone()),
            request_id: self.request_id.clone(),
        };
        self.turn.hand_on(HandedOn::Committed(Arc::new(record)));
    }
}
