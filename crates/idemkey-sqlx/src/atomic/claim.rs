//! The claim atomic mode holds in a transaction ([`AtomicClaim`], [`AtomicBegin`]) and the
//! completions that commit it with the business writes: the stored response and the record
//! commit in the same transaction, or none of them does.

use std::time::Duration;

use idemkey_core::{
    Answer, Claim, ClaimRequest, Record, RecordId, RecordState, Result, StoredResponse,
};
use sqlx::Transaction;

use super::coalescing::LocalTurn;
use crate::failpoints::Point;
use crate::{Backend, SqlxStore};

/// An open write transaction that holds the claim of a scope as its first statement.
///
/// Run the business writes on [`AtomicClaim::tx`], then hand it to
/// [`SqlxStore::complete_atomic`]. Dropping it, or [`AtomicClaim::rollback`], rolls
/// everything back: no business row, no record.
#[derive(Debug)]
pub struct AtomicClaim<DB: Backend> {
    tx: Transaction<'static, DB>,
    claim: Claim,
    /// This process's duplicates of the request wait until it is dropped.
    turn: Option<Box<LocalTurn>>,
}

impl<DB: Backend> AtomicClaim<DB> {
    /// The transaction for the business writes. Use only this one: a second pooled
    /// connection would wait on this transaction's lock.
    pub fn tx(&mut self) -> &mut Transaction<'static, DB> {
        &mut self.tx
    }

    /// The claim, with the record id for derived keys.
    pub fn claim(&self) -> &Claim {
        &self.claim
    }

    /// Splits into the transaction and the claim, to hand the transaction elsewhere. This
    /// process's duplicates of the request stop waiting for it and go to the database.
    pub fn into_parts(self) -> (Transaction<'static, DB>, Claim) {
        (self.tx, self.claim)
    }

    /// Joins a transaction and the claim made in it.
    pub fn from_parts(tx: Transaction<'static, DB>, claim: Claim) -> Self {
        Self {
            tx,
            claim,
            turn: None,
        }
    }

    /// [`Self::into_parts`], keeping the duplicates waiting until the turn is dropped.
    pub(crate) fn split(self) -> (Transaction<'static, DB>, Claim, Option<Box<LocalTurn>>) {
        (self.tx, self.claim, self.turn)
    }

    /// [`Self::from_parts`] with the turn [`Self::split`] gave.
    pub(crate) fn join(
        tx: Transaction<'static, DB>,
        claim: Claim,
        turn: Option<Box<LocalTurn>>,
    ) -> Self {
        Self { tx, claim, turn }
    }

    /// Rolls back the claim and every write made with it.
    pub async fn rollback(self) -> Result<()> {
        self.tx
            .rollback()
            .await
            .map_err(crate::error::store_error::<DB>)
    }
}

/// What atomic mode does for a request, once the store has been asked.
#[derive(Debug)]
pub enum AtomicBegin<DB: Backend> {
    /// Execute: the transaction holds the claim.
    Execute(AtomicClaim<DB>),
    /// Replay this stored response; no transaction is left open.
    Replay(StoredResponse),
    /// 422 `key-reused`.
    Mismatch,
    /// 409 `request-in-flight`: an in-flight row left by lease mode, or (PostgreSQL) a
    /// concurrent claim still uncommitted past the claim's wait bound or the waiter cap.
    InFlight {
        /// When to try again.
        retry_after: Duration,
    },
}

impl<DB: Backend> SqlxStore<DB> {
    /// Stores the response in the claim's record and commits the transaction, business
    /// writes included. Returns only once the commit is acknowledged.
    pub async fn complete_atomic(
        &self,
        atomic: AtomicClaim<DB>,
        response: &StoredResponse,
    ) -> Result<()> {
        // The turn ends after the commit, handing the record to this process's duplicates;
        // on a failure, after the transaction (bindings drop in reverse order).
        let AtomicClaim {
            turn,
            mut tx,
            claim,
        } = atomic;
        self.hit(Point::BeforeComplete).await?;
        DB::complete(&mut tx, &claim, response).await?;
        self.hit(Point::BeforeCommit).await?;
        tx.commit().await.map_err(DB::commit_error)?;
        self.stored(&claim, response);
        if let Some(turn) = turn {
            turn.hand_on(&claim, response);
        }
        Ok(())
    }

    /// Lease mode's completion in the caller's own transaction (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): stores the
    /// response in the claim's record as `tx`'s last statement and commits, so what the
    /// caller wrote in `tx` commits with it or not at all. Fails with
    /// [`Error::Fenced`](idemkey_core::Error::Fenced) if the lease was lost meanwhile; on any failure before the commit
    /// `tx` is rolled back before this returns, so that (on SQLite) the writer is free for
    /// the claim's release.
    ///
    /// Returns once the commit is on disk: a transaction of [`Self::begin_grouped_write`]
    /// commits without its sync, then waits for a sync it shares with concurrent writes
    /// (SQLite). If that sync fails, [`Error::OutcomeUnknown`](idemkey_core::Error::OutcomeUnknown).
    pub async fn complete_in(
        &self,
        mut tx: Transaction<'static, DB>,
        claim: &Claim,
        response: &StoredResponse,
    ) -> Result<()> {
        let stored = async {
            self.hit(Point::BeforeComplete).await?;
            DB::complete(&mut tx, claim, response).await?;
            self.hit(Point::BeforeCommit).await
        }
        .await;
        if let Err(error) = stored {
            rollback(Some(tx)).await;
            return Err(error);
        }
        tx.commit().await.map_err(DB::commit_error)?;
        // A transaction of `begin_grouped_write` committed without its sync. Failed, what
        // committed may not survive a power cut, nor be rolled back: unknown.
        self.flush()
            .await
            .map_err(|error| idemkey_core::Error::OutcomeUnknown(Box::new(error)))?;
        self.stored(claim, response);
        Ok(())
    }
}

impl<DB: Backend> From<Answer> for AtomicBegin<DB> {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Replay(response) => Self::Replay(response),
            Answer::Mismatch => Self::Mismatch,
            Answer::InFlight { retry_after } => Self::InFlight { retry_after },
        }
    }
}

/// Rolls `tx` back, if the handler gave it back; a failure is only logged.
pub(crate) async fn rollback<DB: Backend>(tx: Option<Transaction<'static, DB>>) {
    if let Some(tx) = tx
        && let Err(error) = tx.rollback().await
    {
        // The connection is closed rather than reused when a rollback fails, so nothing
        // half-done survives; the request already failed for its own reason.
        tracing::warn!(%error, "rollback failed");
    }
}

/// The record `request` committed with `stored` under a fresh claim (commit-time's insert,
/// or claim-first's new record), as a lookup would read it.
pub(crate) fn completed(
    request: &ClaimRequest,
    record_id: RecordId,
    token: i64,
    stored: &StoredResponse,
) -> Record {
    Record {
        record_id,
        version: request.operation.version().to_owned(),
        fingerprint: request.fingerprint,
        token,
        state: RecordState::Completed(stored.clone()),
        request_id: request.request_id.clone(),
    }
}
