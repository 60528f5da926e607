//! A claim whose outcome the store left unknown: given back, best effort (behaviour
//! [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).
//!
//! A claim that failed may stand all the same: its reply was lost, the flush after its commit
//! failed, or its wait for replicas or an fsync did. It names this process, which keeps
//! beating, so neither its owner's heartbeat nor anything but its lease would free the key,
//! and every retry would be answered `request-in-flight` until then. Nothing ran under it, so
//! it is released (the record and its id kept, as a handler's release keeps them), and the
//! retry executes.
//!
//! Only what is certainly this request's orphan is released: the claim names this process
//! (the release is fenced by the owner as well as the token), its request is this one (same
//! fingerprint and version), this process runs no execution of it, and this request held the
//! process's turn at the scope throughout, so no other request of the process claimed it
//! meanwhile. A claim without an owner is left to its lease: it could be another process's.

use idemkey_core::{Claim, ClaimRequest, Error, OwnerId, RecordState, Store};

use super::local::{Local, OwnTurn};
use crate::observe::timed;

/// Gives back what `request`'s failed claim may have left in the store, holding `turn` until
/// done. Never fails: a store that cannot be read or written now leaves the claim to its
/// lease.
pub(crate) async fn give_back<St: Store>(
    store: &St,
    local: &Local,
    (request, owner): (&ClaimRequest, OwnerId),
    turn: OwnTurn,
) {
    if local.duplicate(request).is_some() {
        return;
    }
    let record = match timed("lookup", store.lookup(&request.scope)).await {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(error = %err, "could not look for a claim whose outcome is unknown");
            return;
        }
    };
    let ours = matches!(record.state, RecordState::InFlight { .. })
        && record.fingerprint == request.fingerprint
        && record.version == request.operation.version();
    if !ours {
        return;
    }
    let orphan = Claim {
        scope: request.scope.clone(),
        record_id: record.record_id,
        token: record.token,
        lease: request.lease,
        retention: request.retention,
        acquired: std::time::Instant::now(),
        taken_over: false,
        fresh: false,
        owner: Some(owner),
    };
    match timed("release", store.release(&orphan)).await {
        Ok(()) => tracing::warn!("gave back a claim whose reply was lost; the retry executes"),
        // Not this process's claim: another one holds the record.
        Err(Error::Fenced) => {}
        Err(err) => {
            tracing::warn!(error = %err, "could not give back a claim whose outcome is unknown")
        }
    }
    drop(turn);
}
