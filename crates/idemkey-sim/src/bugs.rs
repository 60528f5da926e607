//! The store under the simulation: the real `MemoryStore`, with one bug planted on request.
//!
//! The bugs are planted from outside, through the store's public API, so that the correct
//! runs go through `MemoryStore` untouched: ignoring the fencing token is forging a claim with
//! the record's current token; the application's lease clock is the caller's skew applied to
//! the clock the store reads.

use std::sync::Arc;

use idemkey_core::{
    Claim, ClaimRequest, MemoryStore, Record, Result, Scope, Store, StoredResponse, TryClaim,
};

use crate::Bug;
use crate::clock::skewed;

/// The store one application instance talks to.
#[derive(Clone, Debug)]
pub(crate) struct BugStore {
    inner: MemoryStore,
    bug: Option<Bug>,
    /// This instance's clock skew, used only by [`Bug::AppLeaseClock`].
    skew_ms: i64,
}

impl BugStore {
    pub(crate) fn new(inner: MemoryStore, bug: Option<Bug>, skew_ms: i64) -> Self {
        Self {
            inner,
            bug,
            skew_ms,
        }
    }

    /// The skew the store's clock reads with during this instance's calls.
    fn skew(&self) -> i64 {
        match self.bug {
            Some(Bug::AppLeaseClock) => self.skew_ms,
            _ => 0,
        }
    }

    /// `claim` with the record's current token, when `bug` ignores the token.
    async fn forged(&self, claim: &Claim, ignores_token: bool) -> Claim {
        let mut forged = claim.clone();
        if !ignores_token {
            return forged;
        }
        if let Ok(Some(record)) = self.inner.lookup(&claim.scope).await
            && record.record_id == claim.record_id
        {
            forged.token = record.token;
        }
        forged
    }

    fn unfenced(&self) -> bool {
        self.bug == Some(Bug::NoFencing)
    }
}

impl Store for BugStore {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        skewed(self.skew(), self.inner.lookup(scope)).await
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        skewed(self.skew(), self.inner.try_claim(request)).await
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        skewed(self.skew(), self.inner.reclaim(request, seen)).await
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let claim = self.forged(claim, self.unfenced()).await;
        skewed(self.skew(), self.inner.complete(&claim, response)).await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let ignores = self.unfenced() || self.bug == Some(Bug::ReleaseWithoutToken);
        let claim = self.forged(claim, ignores).await;
        skewed(self.skew(), self.inner.release(&claim)).await
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        skewed(self.skew(), self.inner.discard(claim)).await
    }

    async fn flush_claim(&self, claim: &Claim) -> Result<()> {
        self.inner.flush_claim(claim).await
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        let mut forged = self.forged(claim, self.unfenced()).await;
        let extended = skewed(self.skew(), self.inner.extend(&mut forged)).await;
        // The caller keeps its own token: only the store ignored it.
        claim.acquired = forged.acquired;
        extended
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        self.inner.forget(scope).await
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        skewed(self.skew(), self.inner.sweep(batch)).await
    }

    async fn secret(&self) -> Result<Arc<[u8]>> {
        self.inner.secret().await
    }
}
