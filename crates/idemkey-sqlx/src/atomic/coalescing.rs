//! In-process coalescing of atomic-mode duplicates (behaviour §8: the losers wait for the
//! winner's answer).
//!
//! A request whose scope another request of the same store is already claiming waits for that
//! one to end instead of queueing for SQLite's writer or a PostgreSQL row lock only to find
//! the record there; one that arrives once the other has its turn does not even read the
//! record first (nor take a connection for it). When the first one commits, it hands its
//! record (as committed) to the waiting ones, which answer from it as from a lookup; when it
//! ends without a record, they look again (and the next one claims). A lookup's result is
//! never handed on: each request reads for itself, so no answer predates its request. The
//! database stays the arbiter: across processes and instances, and whenever the wait is cut
//! short.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use idemkey_core::{Claim, ClaimRequest, Fingerprint, Record, RecordState, Scope, StoredResponse};
use tokio::sync::watch;

/// How a request that duplicates were waiting for ended, when it ended with an answer for
/// them (otherwise the channel closes and they look again).
#[derive(Clone, Debug)]
pub(crate) enum Settled {
    /// The record it committed, as committed.
    Committed(Arc<Record>),
    /// Its claim gave up waiting on the database (its bound, or the cap on waiting
    /// claims): they answer in flight with it.
    InFlight,
}

type Sender = watch::Sender<Option<Settled>>;

/// What a duplicate waits on: the request of its scope that has the turn, until it settles
/// (`changed()` is `Ok`) or ends without settling (`Err`: the channel closed).
pub(crate) type Leader = watch::Receiver<Option<Settled>>;

/// The scopes this store's requests are claiming, each with the channel its duplicates wait
/// on.
#[derive(Debug, Default)]
pub(crate) struct LocalClaims {
    claiming: Mutex<HashMap<Scope, Arc<Sender>>>,
}

/// Whose turn it is for a scope in this process.
pub(crate) enum Turn {
    /// Claim; duplicates wait until this is dropped.
    Lead(Box<LocalTurn>),
    /// Another request is claiming: wait on it.
    Follow(Leader),
}

/// A request's turn at claiming a scope; dropping it wakes the duplicates.
#[derive(Debug)]
pub(crate) struct LocalTurn {
    claims: Arc<LocalClaims>,
    scope: Scope,
    settled: Arc<Sender>,
    version: String,
    fingerprint: Fingerprint,
    request_id: Option<String>,
}

impl LocalClaims {
    /// Whether a request of this store has its turn on `scope` now.
    pub(crate) fn is_taken(&self, scope: &Scope) -> bool {
        let claiming = self.claiming.lock().unwrap_or_else(PoisonError::into_inner);
        claiming.contains_key(scope)
    }

    /// Waits on the request of this store that has its turn on `scope`, if one has: the
    /// receiver of [`Turn::Follow`], without taking a turn when none is taken.
    pub(crate) fn follow(&self, scope: &Scope) -> Option<Leader> {
        let claiming = self.claiming.lock().unwrap_or_else(PoisonError::into_inner);
        claiming.get(scope).map(|leader| leader.subscribe())
    }

    pub(crate) fn take(self: &Arc<Self>, request: &ClaimRequest) -> Turn {
        let mut claiming = self.claiming.lock().unwrap_or_else(PoisonError::into_inner);
        // Subscribing under the lock: a leader that ends right after still wakes us.
        if let Some(leader) = claiming.get(&request.scope) {
            return Turn::Follow(leader.subscribe());
        }
        let settled = Arc::new(watch::channel(None).0);
        claiming.insert(request.scope.clone(), settled.clone());
        Turn::Lead(Box::new(LocalTurn {
            claims: self.clone(),
            scope: request.scope.clone(),
            settled,
            version: request.operation.version().to_owned(),
            fingerprint: request.fingerprint,
            request_id: request.request_id.clone(),
        }))
    }
}

impl LocalTurn {
    /// The claim took over `record`: what it commits keeps that record's version, fingerprint
    /// and request id, not this request's.
    pub(crate) fn adopt(&mut self, record: &Record) {
        self.version.clone_from(&record.version);
        self.fingerprint = record.fingerprint;
        self.request_id.clone_from(&record.request_id);
    }

    /// Tells the waiting duplicates that this claim waited on the database past the bound.
    pub(crate) fn in_flight(&self) {
        self.settled.send_replace(Some(Settled::InFlight));
    }

    /// Hands the record this turn's claim committed, with `response` stored, to the waiting
    /// duplicates. Call only once the commit is acknowledged.
    pub(crate) fn settle(&self, claim: &Claim, response: &StoredResponse) {
        let record = Record {
            record_id: claim.record_id,
            version: self.version.clone(),
            fingerprint: self.fingerprint,
            token: claim.token,
            state: RecordState::Completed(response.clone()),
            request_id: self.request_id.clone(),
        };
        let settled = Settled::Committed(Arc::new(record));
        self.settled.send_replace(Some(settled));
    }
}

impl Drop for LocalTurn {
    fn drop(&mut self) {
        let mut claiming = self
            .claims
            .claiming
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // With this turn's, the last sender goes: every follower's receiver closes.
        claiming.remove(&self.scope);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str) -> ClaimRequest {
        let operation = idemkey_core::Operation::new("op", "v1");
        let key = idemkey_core::Key::parse(key.as_bytes()).unwrap();
        ClaimRequest::new(
            "actor",
            operation,
            key,
            Fingerprint::builder("POST", "/").body(b""),
        )
    }

    #[tokio::test]
    async fn duplicates_wait_for_the_leader_and_other_scopes_do_not() {
        let claims = Arc::new(LocalClaims::default());
        let Turn::Lead(leader) = claims.take(&request("a")) else {
            panic!("the first request leads");
        };
        assert!(matches!(claims.take(&request("b")), Turn::Lead(_)));
        let Turn::Follow(mut follower) = claims.take(&request("a")) else {
            panic!("a duplicate follows");
        };
        drop(leader);
        assert!(
            follower.changed().await.is_err(),
            "woken by the leader's end"
        );
        assert!(matches!(claims.take(&request("a")), Turn::Lead(_)));
    }
}
