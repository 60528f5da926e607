//! Telling a fresh record from one with history, for [`NotExecuted`](crate::NotExecuted).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use idemkey_core::{Claim, ClaimRequest, Record, Result, Scope, Store, StoredResponse, TryClaim};

/// A store that notes whether [`idemkey_core::begin`] claimed a record again (after a release
/// or a takeover) rather than inserting a new one.
///
/// Only a new record may be deleted when the handler reports that it did nothing: a record
/// claimed again may have an earlier execution behind it whose external effects used its
/// derived keys, and deleting it would give a retry new ones.
#[derive(Clone)]
pub(crate) struct ReclaimProbe<St> {
    inner: St,
    reclaimed: Arc<AtomicBool>,
}

impl<St> ReclaimProbe<St> {
    pub(crate) fn new(inner: St) -> Self {
        Self {
            inner,
            reclaimed: Arc::default(),
        }
    }

    /// Whether the claim came from inserting a new record.
    pub(crate) fn fresh(&self) -> bool {
        !self.reclaimed.load(Ordering::SeqCst)
    }
}

impl<St: Store> Store for ReclaimProbe<St> {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        self.inner.lookup(scope).await
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        self.inner.try_claim(request).await
    }

    async fn reclaim(&self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        let claim = self.inner.reclaim(request, seen).await?;
        if claim.is_some() {
            self.reclaimed.store(true, Ordering::SeqCst);
        }
        Ok(claim)
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        self.inner.complete(claim, response).await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        self.inner.release(claim).await
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        self.inner.extend(claim).await
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        self.inner.forget(scope).await
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        self.inner.sweep(batch).await
    }
}
