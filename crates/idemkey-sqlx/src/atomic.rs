//! Atomic mode (behaviour §8): the claim, the caller's business writes and the stored response
//! commit in one transaction, or none of them does.

use std::time::{Duration, Instant};

use idemkey_core::{
    Answer, Claim, ClaimRequest, Decision, Error, ExpiredLease, Result, StoredResponse, TryClaim,
    decide, previous_attempt_unknown, retry_after,
};
use sqlx::Transaction;
use sqlx::pool::PoolConnection;

use crate::failpoints::Point;
use crate::local::{Leader, LocalTurn, Settled, Turn};
use crate::{Backend, Looked, SqlxStore};

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
    /// Opens a write transaction and claims the scope as its first statement, or answers
    /// from the record without running anything.
    ///
    /// A read-only lookup first serves replays without taking the write lock. On PostgreSQL
    /// a claim that meets a concurrent uncommitted claim waits for it (bounded) and then
    /// answers from the committed record, or claims if it rolled back.
    pub async fn begin_atomic(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
    ) -> Result<AtomicBegin<DB>> {
        self.begin_atomic_by(request, on_expired, None).await
    }

    /// [`Self::begin_atomic`]; `deadline` bounds a wait for another request of this process
    /// that began before (see [`Self::after_leader`]).
    async fn begin_atomic_by(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
        deadline: Option<Instant>,
    ) -> Result<AtomicBegin<DB>> {
        if let Some(answer) = self.cached_answer(request, on_expired) {
            return Ok(answer.into());
        }
        let mut conn = match self.connect_unless_led(request).await? {
            Ok(conn) => conn,
            Err(leader) => {
                return Box::pin(self.after_leader(request, on_expired, leader, deadline)).await;
            }
        };
        self.hit(Point::BeforeLookup).await?;
        if let Looked::Answer(answer) = self.look_up_on(&mut conn, request, on_expired).await? {
            return Ok(answer.into());
        }
        // Kept for the claim where the backend begins it on this connection (PostgreSQL);
        // dropped here otherwise, so that a request paused below holds none.
        let conn = DB::CLAIM_ON_LOOKUP_CONNECTION.then_some(conn);
        self.hit(Point::AfterLookup).await?;
        let mut turn = match self.local.as_ref().map(|local| local.take(request)) {
            Some(Turn::Follow(leader)) => {
                drop(conn);
                return Box::pin(self.after_leader(request, on_expired, leader, deadline)).await;
            }
            Some(Turn::Lead(turn)) => Some(turn),
            None => None,
        };
        let Some((mut tx, claimed)) = DB::begin_claim(self, request, conn).await? else {
            if let Some(turn) = &turn {
                turn.in_flight();
            }
            // A concurrent claim is still uncommitted past the wait bound: its lease is
            // not visible, so the shortest Retry-After.
            let retry_after = retry_after(Duration::ZERO);
            return Ok(AtomicBegin::InFlight { retry_after });
        };
        let record = match claimed {
            TryClaim::Claimed(claim) => {
                // A refusal drops the transaction (rolled back) and the turn (this process's
                // duplicates look again).
                self.within_caps(&mut tx, request, None).await?;
                return Ok(AtomicBegin::Execute(AtomicClaim::join(tx, claim, turn)));
            }
            TryClaim::Existing(record) => record,
        };
        let decision = match decide(request, &record, on_expired).into_answer() {
            Ok(answer) => return Ok(answer.into()),
            Err(decision) => decision,
        };
        // The write transaction holds the record, so it cannot change under us.
        let claim = DB::reclaim(&mut tx, request, &record)
            .await?
            .ok_or(Error::Contention)?;
        if let Some(turn) = &mut turn {
            turn.adopt(&record);
        }
        if decision == Decision::Reclaim {
            return Ok(AtomicBegin::Execute(AtomicClaim::join(tx, claim, turn)));
        }
        let response = previous_attempt_unknown();
        self.complete_atomic(AtomicClaim::join(tx, claim, turn), &response)
            .await?;
        Ok(AtomicBegin::Replay(response))
    }

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
        if let Some(turn) = turn {
            turn.settle(&claim, response);
        }
        Ok(())
    }

    /// Lease mode's completion in the caller's own transaction (behaviour §8a): stores the
    /// response in the claim's record as `tx`'s last statement and commits, so what the
    /// caller wrote in `tx` commits with it or not at all. Fails with
    /// [`Error::Fenced`] if the lease was lost meanwhile; on any failure before the commit
    /// `tx` is rolled back before this returns, so that (on SQLite) the writer is free for
    /// the claim's release.
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
            crate::execute::rollback(Some(tx)).await;
            return Err(error);
        }
        tx.commit().await.map_err(DB::commit_error)
    }
}

impl<DB: Backend> SqlxStore<DB> {
    /// A connection for the request's lookup, unless another request of this process
    /// already has its turn on the scope: then (`Err`) the receiver to wait on it with, and
    /// the lookup is not made, since the waiting decides on what that request commits. Asked
    /// again once the connection is had, which may take a while under load.
    pub(crate) async fn connect_unless_led(
        &self,
        request: &ClaimRequest,
    ) -> Result<std::result::Result<PoolConnection<DB>, Leader>> {
        let led = || self.local.as_ref()?.follow(&request.scope);
        if let Some(leader) = led() {
            return Ok(Err(leader));
        }
        let conn = self.conn().await?;
        Ok(led().map_or(Ok(conn), Err))
    }

    /// A duplicate of a request this process is claiming: waits for it, answers from the
    /// record it committed (or in flight if it waited past the bound), or begins again from
    /// the lookup when it ended without either. One bound, like a claim waiting on the
    /// database, covers every wait of the request, however many requests it follows in turn.
    pub(crate) async fn after_leader(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
        mut leader: Leader,
        deadline: Option<Instant>,
    ) -> Result<AtomicBegin<DB>> {
        self.hit(Point::Follow).await?;
        let in_flight = || {
            let retry_after = retry_after(Duration::ZERO);
            Ok(AtomicBegin::InFlight { retry_after })
        };
        let deadline =
            deadline.unwrap_or_else(|| Instant::now() + DB::duplicate_wait(&self.settings));
        let settled = loop {
            // Settled before this request subscribed, or since it last looked.
            if let Some(settled) = leader.borrow_and_update().clone() {
                break Some(settled);
            }
            match tokio::time::timeout_at(deadline.into(), leader.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_closed)) => break None,
                Err(_elapsed) => {
                    tracing::debug!("in-process duplicate waited its bound: in flight");
                    return in_flight();
                }
            }
        };
        if let Some(Settled::InFlight) = settled {
            return in_flight();
        }
        if let Some(Settled::Committed(record)) = settled
            && let Ok(answer) = decide(request, &record, on_expired).into_answer()
        {
            return Ok(answer.into());
        }
        self.begin_atomic_by(request, on_expired, Some(deadline))
            .await
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
