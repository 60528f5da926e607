//! A `MemoryStore` that reports its calls and can be told to fail.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::Signal;
use std::time::Duration;

use idemkey_core::{
    Claim, ClaimRequest, Error, MemoryStore, OwnerId, Record, Result, Scope, Store, StoredResponse,
    TryClaim,
};

/// How claims fail when told to.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fail {
    Unavailable,
    OutcomeUnknown,
}

#[derive(Default)]
pub(crate) struct Hooks {
    /// A permit per finished lookup.
    pub(crate) lookups: Signal,
    /// A permit per finished complete, successful or not.
    pub(crate) completes: Signal,
    /// A permit per finished release, successful or not.
    pub(crate) releases: Signal,
    /// Woken on every successful lease extension.
    pub(crate) extended: Notify,
    /// How many of the next completions fail as unavailable.
    pub(crate) failing_completes: AtomicUsize,
    /// How many of the next completions apply, then fail as unavailable: a lost reply.
    pub(crate) lost_complete_replies: AtomicUsize,
    /// How many of the next claims apply, then fail as unavailable: a lost reply.
    pub(crate) lost_claim_replies: AtomicUsize,
    /// How many claims were asked of the store.
    pub(crate) claims: AtomicUsize,
    /// When set, the next claim raises `claim_reached` and waits for `claim_go` before it
    /// reaches the store.
    pub(crate) hold_next_claim: AtomicBool,
    pub(crate) claim_reached: Signal,
    pub(crate) claim_go: Signal,
    /// While set, every owner heartbeat fails as unavailable: a store the process cannot
    /// reach.
    pub(crate) failing_beats: AtomicBool,
    fail: Mutex<Option<Fail>>,
}

#[derive(Clone)]
pub(crate) struct TestStore {
    pub(crate) inner: MemoryStore,
    pub(crate) hooks: Arc<Hooks>,
}

impl TestStore {
    pub(super) fn new(inner: MemoryStore) -> Self {
        Self {
            inner,
            hooks: Arc::default(),
        }
    }

    /// Makes every claim fail from now on.
    pub(crate) fn fail_claims(&self, fail: Fail) {
        *self.hooks.fail.lock().expect("not poisoned") = Some(fail);
    }

    fn failure(&self) -> Option<Error> {
        let fail = *self.hooks.fail.lock().expect("not poisoned");
        let cause = "injected by the test".into();
        fail.map(|fail| match fail {
            Fail::Unavailable => Error::Unavailable(cause),
            Fail::OutcomeUnknown => Error::OutcomeUnknown(cause),
        })
    }
}

impl Store for TestStore {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        let found = self.inner.lookup(scope).await;
        self.hooks.lookups.raise(1);
        found
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        self.hooks.claims.fetch_add(1, Ordering::SeqCst);
        if self.hooks.hold_next_claim.swap(false, Ordering::SeqCst) {
            self.hooks.claim_reached.raise(1);
            self.hooks.claim_go.take().await;
        }
        match self.failure() {
            Some(err) => Err(err),
            None if take_one(&self.hooks.lost_claim_replies) => {
                self.inner.try_claim(request).await?;
                Err(Error::Unavailable(
                    "the claim's reply, lost by the test".into(),
                ))
            }
            None => self.inner.try_claim(request).await,
        }
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        self.inner.reclaim(request, seen).await
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let fail = take_one(&self.hooks.failing_completes);
        let lose = take_one(&self.hooks.lost_complete_replies);
        let done = if fail {
            Err(Error::Unavailable("injected by the test".into()))
        } else {
            let done = self.inner.complete(claim, response).await;
            match done {
                Ok(()) if lose => Err(Error::Unavailable("reply lost, by the test".into())),
                done => done,
            }
        };
        self.hooks.completes.raise(1);
        done
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let done = self.inner.release(claim).await;
        self.hooks.releases.raise(1);
        done
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        let done = self.inner.discard(claim).await;
        self.hooks.releases.raise(1);
        done
    }

    async fn flush_claim(&self, claim: &Claim) -> Result<()> {
        self.inner.flush_claim(claim).await
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        let done = self.inner.extend(claim).await;
        if done.is_ok() {
            self.hooks.extended.notify_waiters();
        }
        done
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        self.inner.forget(scope).await
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        self.inner.sweep(batch).await
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        self.inner.secret().await
    }

    async fn beat(&self, owner: OwnerId, grace: Duration) -> Result<()> {
        if self.hooks.failing_beats.load(Ordering::SeqCst) {
            return Err(Error::Unavailable("heartbeat refused by the test".into()));
        }
        self.inner.beat(owner, grace).await
    }
}

/// Takes one from a countdown; false once it is at zero.
fn take_one(countdown: &AtomicUsize) -> bool {
    countdown
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}
