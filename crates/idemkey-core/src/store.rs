//! The store trait every backend implements (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions), [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode), [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    ActorCaps, Claim, ClaimRequest, Error, OwnerId, Record, Result, Scope, StoredResponse,
};

/// The outcome of [`Store::try_claim`].
#[derive(Clone, Debug)]
pub enum TryClaim {
    /// No live record existed (or it had expired and was replaced): the caller executes.
    Claimed(Claim),
    /// A live record exists; [`crate::decide`] says what it means for this request.
    Existing(Record),
}

/// What [`Store::forget_actor`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActorForgotten {
    /// The records deleted: the actor's completed records, and any of its expired ones.
    pub forgotten: u64,
    /// The actor's live records left after the deletion: in flight (a request is still
    /// executing) or released for a retry, or completed since. None of them held a response
    /// when they were passed over; one in flight may complete and replay after.
    pub kept: u64,
}

impl ActorForgotten {
    /// `forgotten` records deleted, `kept` live ones left: for stores outside this crate.
    pub fn new(forgotten: u64, kept: u64) -> Self {
        Self { forgotten, kept }
    }
}

/// A store of idempotency records for lease mode.
///
/// Every time is taken from the store's own clock (the database's, for SQL stores). All
/// operations on a claim are fenced by its token: once another executor has taken over,
/// the old claim can neither complete, release nor extend (`Error::Fenced`).
///
/// Most callers use [`crate::begin`], which drives these primitives through the decision
/// table; the primitives are public so that every backend can be tested the same way.
pub trait Store: Clone + Send + Sync + 'static {
    /// The live record of a scope, if any. Expired records are absent, swept or not.
    fn lookup(&self, scope: &Scope) -> impl Future<Output = Result<Option<Record>>> + Send;

    /// Inserts an in-flight record with a fresh id, token and lease, unless a live record
    /// exists, which is returned instead. An expired record is replaced in the same step.
    fn try_claim(&self, request: &ClaimRequest) -> impl Future<Output = Result<TryClaim>> + Send;

    /// Claims `seen` again with the next token, keeping its record id, if it is still as seen:
    /// the same token, and either released or in flight with an expired lease.
    /// `None` when it changed in between.
    fn reclaim(
        &self,
        request: &ClaimRequest,
        seen: &Record,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send;

    /// Stores the response and completes the record, if `claim` still holds it.
    fn complete(
        &self,
        claim: &Claim,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Gives the claim back without a response, keeping the record (and its id, so the
    /// derived keys) for a retry, if `claim` still holds it.
    fn release(&self, claim: &Claim) -> impl Future<Output = Result<()>> + Send;

    /// Deletes the record the claim holds, if it still holds it: for a handler that reports
    /// it did nothing, so that the key may carry a corrected request. Only for a
    /// [`Claim::fresh`] claim: a record claimed again may have an earlier execution behind it
    /// whose external effects used its derived keys.
    fn discard(&self, claim: &Claim) -> impl Future<Output = Result<()>> + Send;

    /// Returns once `claim` is on disk, if it was granted with [`ClaimFlush::Deferred`]
    /// (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)):
    /// await it before the first effect outside the store's database under the claim. A
    /// store that grouped the claim's commit waits for a flush that covers it, shared with
    /// every caller that asks meanwhile; a store whose claims are durable when granted
    /// returns at once. No default: a store that wraps another must pass it on, or a
    /// deferred claim would never be flushed.
    ///
    /// [`ClaimFlush::Deferred`]: crate::ClaimFlush::Deferred
    fn flush_claim(&self, claim: &Claim) -> impl Future<Output = Result<()>> + Send;

    /// Renews the lease for another `claim.lease`, if `claim` still holds it (heartbeat).
    fn extend(&self, claim: &mut Claim) -> impl Future<Output = Result<()>> + Send;

    /// Deletes one scope's record, whatever its state. `true` if there was one.
    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes a scope's record only if operation version `version` wrote it, in one step, so
    /// that a forget naming a version never deletes another version's record. `true` if it
    /// did. The default refuses with [`Error::Backend`]: a store that keeps each record's
    /// version overrides it.
    fn forget_version(
        &self,
        scope: &Scope,
        version: &str,
    ) -> impl Future<Output = Result<bool>> + Send {
        let _ = (scope, version);
        std::future::ready(Err(Error::Backend(
            "this store cannot forget a record by the version that wrote it".into(),
        )))
    }

    /// Deletes every completed record of `actor`, whatever its operation and key, and any of
    /// its expired records, so that none of its stored responses is replayed again (behaviour
    /// [§9](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#9-retention-and-time)): for a credential revoked upstream, whose
    /// replays would otherwise outlive it for the retention.
    ///
    /// A record without a response is kept and counted in [`ActorForgotten::kept`]: one in
    /// flight still has its request executing, which a deletion would let a retry execute a
    /// second time beside it; a released one keeps its record id, so the derived keys, for
    /// its retry. Each record is deleted in a short write of its own or in small batches, so
    /// requests are served meanwhile. The default refuses with [`Error::Backend`]: a store
    /// that can enumerate an actor's records overrides it.
    fn forget_actor(&self, actor: &str) -> impl Future<Output = Result<ActorForgotten>> + Send {
        let _ = actor;
        std::future::ready(Err(Error::Backend(
            "this store cannot forget all of an actor's records".into(),
        )))
    }

    /// Deletes up to `batch` expired records in one short transaction, re-checking expiry in
    /// the delete itself. Returns how many it deleted; call again until it returns 0.
    fn sweep(&self, batch: u32) -> impl Future<Output = Result<u64>> + Send;

    /// The heartbeat of `owner` (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): the owner is alive until `grace` from now,
    /// by the store's clock. A claim naming an owner ([`ClaimRequest::owner`]) whose last
    /// heartbeat has lapsed counts as expired, whatever its lease: lookups see no lease left,
    /// and [`Store::reclaim`] takes it over. Lapsed means past the grace **and** after a
    /// grace of beats without a gap: the store keeps since when some owner has beaten at
    /// least every two fifths of a grace, and after an outage that stopped every beat, nobody
    /// is lapsed before the owners had a whole grace to beat again (see the conformance case
    /// `an_outage_longer_than_the_grace_stales_no_one`). An owner of which the store has no heartbeat
    /// leaves its claims to their leases, so that a wrapper store that does not forward this
    /// method is only slower to recover, never wrong. One write per owner, however many
    /// claims it holds. The default does nothing: claims live by their leases alone.
    fn beat(&self, owner: OwnerId, grace: Duration) -> impl Future<Output = Result<()>> + Send {
        let _ = (owner, grace);
        async { Ok(()) }
    }

    /// The same store holding each actor to `caps` (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)):
    /// a request that would create a record for an actor at one of them is refused with
    /// [`Error::ActorCap`], and a retry answered from an existing record never is. Fails only
    /// when this store cannot keep caps: the default takes unlimited caps, and refuses any
    /// other with [`Error::Backend`], so that a cap is never set and silently not kept.
    ///
    /// ```
    /// # use idemkey_core::{ActorCaps, MemoryStore, Store};
    /// // The memory store keeps no caps: it takes none, and refuses any.
    /// assert!(MemoryStore::new().with_caps(ActorCaps::new()).is_ok());
    /// assert!(MemoryStore::new().with_caps(ActorCaps::new().max_records(10)).is_err());
    /// ```
    fn with_caps(self, caps: ActorCaps) -> Result<Self> {
        if caps.is_unlimited() {
            Ok(self)
        } else {
            Err(Error::Backend(
                "this store cannot hold actors to per-actor caps".into(),
            ))
        }
    }

    /// Whether [`crate::begin`] reads the record ([`Store::lookup`]) before claiming. A
    /// lookup first keeps replays and duplicates off the write path, which pays where a
    /// claim costs more than a read (the SQL stores: a write that queues for the writer). A
    /// store whose claim costs what its lookup costs, and returns the live record it meets
    /// (Redis: one script either way), answers `false` and saves a round trip on every first
    /// request. Defaults to `true`.
    fn lookup_first(&self) -> bool {
        true
    }

    /// The secret behind derived keys (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): made at random the first time it is
    /// asked for, then kept by the store, so that it is the same across restarts and for
    /// every process that shares the store. Never empty. Callers may cache it.
    fn secret(&self) -> impl Future<Output = Result<Arc<[u8]>>> + Send;
}
