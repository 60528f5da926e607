//! What a lease layer is doing in this process: the scopes it executes, and whose turn it is
//! to ask the store about a scope (the turns are taken in [`super::begin`]).
//!
//! A duplicate of a request this process is running would only learn from the store what the
//! process already knows: the record is in flight. Answered here, a storm of duplicates costs
//! the store nothing (each would otherwise take a pooled connection or a round trip, and queue
//! behind the others), and a duplicate that waits for the original is woken when it ends
//! instead of polling the record.
//!
//! Only an exact duplicate (same fingerprint and operation version) of an execution whose lease
//! is live is answered here, and only with what the store would answer: the record is in
//! flight. The lease counts as live until the last renewal's start plus the lease, by this
//! process's clock: the store granted it after that instant, so it is live there too. An
//! execution whose renewals fail (its store unreachable, or, in the simulation, its executor
//! killed) lets its lease run out here as in the store, and duplicates go to the store, which
//! may hand the record to another executor. Anything else asks the store too, which decides
//! mismatches. A duplicate is never executed on the word of this registry.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::liveness::OwnerMark;
use idemkey_core::{ClaimRequest, Identity, Scope, Turns};
use tokio::sync::watch;
use tokio::time::Instant;

/// The scopes being executed, with what a duplicate must match.
#[derive(Debug, Default)]
pub(crate) struct Local {
    scopes: Mutex<HashMap<Scope, Entry>>,
    /// The scopes a request of this process is looking up or claiming from the store right
    /// now (see [`super::begin`]). They hand on nothing: a duplicate woken by the end of one
    /// looks for the execution it left, if any, among `scopes`.
    turns: Arc<Turns<Infallible>>,
}

/// Whose turn it is to look up and claim a scope in this process (see [`Local::turn`]).
pub(crate) type Turn = idemkey_core::Turn<Infallible>;

/// A request's turn at looking up and claiming its scope, held until dropped: after the
/// lookup answered, after the claim was refused, or, when it was granted, after the execution
/// is registered with [`Local::enter`], so that a woken duplicate finds it there.
pub(crate) type OwnTurn = idemkey_core::OwnTurn<Infallible>;

#[derive(Debug)]
struct Entry {
    identity: Identity,
    lease: Arc<LeaseMark>,
    /// Dropped when the execution ends, which wakes every waiting duplicate.
    ended: watch::Sender<()>,
}

/// When an execution's lease runs out, by this process's clock, as last renewed.
#[derive(Debug)]
pub(crate) struct LeaseMark {
    until: Mutex<Instant>,
    lease: Duration,
    /// The process's heartbeat, if its claims name it: the claim is as live as both.
    owner: std::sync::OnceLock<Arc<OwnerMark>>,
}

impl LeaseMark {
    fn new(asked: Instant, lease: Duration) -> Self {
        Self {
            until: Mutex::new(asked + lease),
            lease,
            owner: std::sync::OnceLock::new(),
        }
    }

    fn until(&self) -> MutexGuard<'_, Instant> {
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A renewal sent at `sent` succeeded.
    pub(crate) fn renewed(&self, sent: Instant) {
        *self.until() = sent + self.lease;
    }

    /// The claim names this process, whose heartbeat `owner` tracks.
    pub(crate) fn owned_by(&self, owner: Arc<OwnerMark>) {
        let _ = self.owner.set(owner);
    }

    fn live(&self) -> bool {
        Instant::now() < *self.until() && self.owner.get().is_none_or(|owner| owner.live())
    }
}

/// Registers an execution until dropped (the execution stored or released its claim, or its
/// task unwound).
#[derive(Debug)]
pub(crate) struct LocalExecution {
    local: Arc<Local>,
    scope: Scope,
    ended: watch::Receiver<()>,
    lease: Arc<LeaseMark>,
    /// The entry's sender once [`LocalExecution::settling`] took the entry out: its waiters are
    /// woken when this guard drops, after the store has the outcome.
    settled: Option<watch::Sender<()>>,
}

impl LocalExecution {
    /// The mark the execution's heartbeat renews.
    pub(crate) fn lease(&self) -> Arc<LeaseMark> {
        self.lease.clone()
    }

    /// The handler is done and its outcome is about to be stored: from now on a duplicate
    /// asks the store, which may already know the outcome (a duplicate answered here would
    /// be told 409 after the store had the replay). Waiters stay until this guard drops.
    pub(crate) fn settling(&mut self) {
        if let Some(entry) = self.local.take_own(&self.scope, &self.ended) {
            self.settled = Some(entry.ended);
        }
    }
}

impl Local {
    fn scopes(&self) -> MutexGuard<'_, HashMap<Scope, Entry>> {
        // A panic while the lock was held left the map as it was: go on with it.
        self.scopes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the turn to look up and claim `request`'s scope, or tells whose it is. Only one
    /// request of a scope asks the store at a time here: a storm of duplicates would
    /// otherwise queue for the store's connections, each to read what the first one finds
    /// and to send a claim the store can only refuse.
    pub(crate) fn turn(&self, request: &ClaimRequest) -> Turn {
        self.turns.take(request)
    }

    /// Registers the execution of `request`, whose claim was granted a lease of `lease` by a
    /// call sent at `asked`.
    pub(crate) fn enter(
        self: &Arc<Self>,
        request: &ClaimRequest,
        (asked, lease): (Instant, Duration),
    ) -> LocalExecution {
        let (ended, receiver) = watch::channel(());
        let mark = Arc::new(LeaseMark::new(asked, lease));
        let entry = Entry {
            identity: Identity::of(request),
            lease: mark.clone(),
            ended,
        };
        self.scopes().insert(request.scope.clone(), entry);
        LocalExecution {
            local: self.clone(),
            scope: request.scope.clone(),
            ended: receiver,
            lease: mark,
            settled: None,
        }
    }

    /// Removes the scope's entry if it is the one `ended` listens to.
    fn take_own(&self, scope: &Scope, ended: &watch::Receiver<()>) -> Option<Entry> {
        let mut scopes = self.scopes();
        let own = scopes
            .get(scope)
            .is_some_and(|entry| ended.same_channel(&entry.ended.subscribe()));
        if own { scopes.remove(scope) } else { None }
    }

    /// How many duplicates wait for the executions registered here to end (and, for an
    /// instant, a duplicate's check in its lookup): each entry's receivers but the one its
    /// execution keeps.
    pub(crate) fn waiting(&self) -> usize {
        let scopes = self.scopes();
        let receivers = scopes.values().map(|entry| entry.ended.receiver_count());
        receivers.map(|count| count.saturating_sub(1)).sum()
    }

    /// If `request` duplicates an execution running here: a receiver whose `changed` returns
    /// (an error) once that execution has ended.
    pub(crate) fn duplicate(&self, request: &ClaimRequest) -> Option<watch::Receiver<()>> {
        let scopes = self.scopes();
        let entry = scopes.get(&request.scope)?;
        (entry.identity.matches(request) && entry.lease.live()).then(|| entry.ended.subscribe())
    }
}

impl Drop for LocalExecution {
    fn drop(&mut self) {
        // Only this execution's own entry: a later one of the same scope may have replaced it.
        // Dropping the entry (or the sender `settling` kept) wakes the waiters.
        drop(self.local.take_own(&self.scope, &self.ended));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use idemkey_core::testkit::request;

    use super::*;

    const LEASE: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn a_duplicate_is_known_until_the_execution_ends() {
        let local = Arc::new(Local::default());
        let original = request("{\"a\":1}");
        assert!(local.duplicate(&original).is_none());
        let executing = local.enter(&original, (Instant::now(), LEASE));
        let mut waiting = local.duplicate(&original.clone()).unwrap();

        let mut other_body = request("{\"a\":2}");
        other_body.scope = original.scope.clone();
        assert!(local.duplicate(&other_body).is_none(), "the store decides");
        assert!(
            local.duplicate(&request("{\"a\":1}")).is_none(),
            "another scope"
        );

        drop(executing);
        assert!(waiting.changed().await.is_err(), "woken when it ends");
        assert!(local.duplicate(&original).is_none());
    }

    #[tokio::test]
    async fn settling_sends_duplicates_to_the_store_and_wakes_waiters_at_the_end() {
        let local = Arc::new(Local::default());
        let req = request("{}");
        let mut executing = local.enter(&req, (Instant::now(), LEASE));
        let mut waiting = local.duplicate(&req).unwrap();
        executing.settling();
        assert!(local.duplicate(&req).is_none(), "asks the store");
        assert!(waiting.has_changed().is_ok(), "still waiting");
        drop(executing);
        assert!(waiting.changed().await.is_err());
    }

    #[test]
    fn an_older_execution_leaves_a_newer_one_registered() {
        let local = Arc::new(Local::default());
        let req = request("{}");
        let older = local.enter(&req, (Instant::now(), LEASE));
        let newer = local.enter(&req, (Instant::now(), LEASE));
        drop(older);
        assert!(local.duplicate(&req).is_some());
        drop(newer);
        assert!(local.duplicate(&req).is_none());
    }
}

#[cfg(test)]
mod lease_tests {
    #![allow(clippy::unwrap_used)]
    use idemkey_core::testkit::request;

    use super::*;

    /// Past its lease without a renewal the execution is left to the store; a renewal brings
    /// it back.
    #[tokio::test(start_paused = true)]
    async fn a_lease_not_renewed_in_time_is_left_to_the_store() {
        let local = Arc::new(Local::default());
        let req = request("{}");
        let executing = local.enter(&req, (Instant::now(), Duration::from_secs(3)));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(local.duplicate(&req).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(local.duplicate(&req).is_none(), "the lease ran out here");
        executing.lease().renewed(Instant::now());
        assert!(local.duplicate(&req).is_some());
    }
}
