//! [`SqlxStore::begin_atomic`]: claim-first's claim, after the lookup and this process's
//! turn on the scope, decided by core's table.

use std::time::{Duration, Instant};

use idemkey_core::{
    Begin, Claim, ClaimRequest, ClaimWrites, Error, ExpiredLease, Record, Result, StoredResponse,
    TryClaim, Turn, claim_by, decide, retry_after,
};
use sqlx::Transaction;
use sqlx::pool::PoolConnection;

use super::claim::{AtomicBegin, AtomicClaim};
use super::coalescing::{HandedOn, Leader, LocalTurn};
use super::lookup::AtomicLookup;
use crate::failpoints::Point;
use crate::{Backend, SqlxStore};

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
        if let AtomicLookup::Answer(answer) = self
            .lookup_atomic_on(&mut conn, request, on_expired)
            .await?
        {
            return Ok(answer.into());
        }
        // Kept for the claim where the backend begins it on this connection (PostgreSQL);
        // dropped here otherwise, so that a request paused below holds none.
        let conn = DB::CLAIM_ON_LOOKUP_CONNECTION.then_some(conn);
        self.hit(Point::AfterLookup).await?;
        let turn = match self.local.as_ref().map(|local| local.take(request)) {
            Some(Turn::Follow(leader) | Turn::Other(leader)) => {
                drop(conn);
                return Box::pin(self.after_leader(request, on_expired, leader, deadline)).await;
            }
            Some(Turn::Lead(turn)) => Some(LocalTurn::new(turn, request)),
            None => None,
        };
        self.claim_in_transaction(request, on_expired, conn, turn)
            .await
    }

    /// The database's claim, in a transaction begun on `conn` if given, then core's table on
    /// what it met, with the writes in that transaction.
    async fn claim_in_transaction(
        &self,
        request: &ClaimRequest,
        on_expired: ExpiredLease,
        conn: Option<PoolConnection<DB>>,
        turn: Option<Box<LocalTurn>>,
    ) -> Result<AtomicBegin<DB>> {
        let Some((tx, claimed)) = DB::begin_claim(self, request, conn).await? else {
            if let Some(turn) = &turn {
                turn.in_flight();
            }
            // A concurrent claim is still uncommitted past the wait bound: its lease is
            // not visible, so the shortest Retry-After.
            let retry_after = retry_after(Duration::ZERO);
            return Ok(AtomicBegin::InFlight { retry_after });
        };
        let mut writes = InTransaction {
            store: self,
            tx: Some(tx),
            turn,
            claimed: Some(claimed),
        };
        // One round: the write transaction holds the record, so it cannot change under us.
        Ok(match claim_by(&mut writes, request, on_expired, 1).await? {
            Begin::Execute(claim) => {
                let tx = writes.tx.take().ok_or_else(ended)?;
                AtomicBegin::Execute(AtomicClaim::join(tx, claim, writes.turn.take()))
            }
            Begin::Replay(response) => AtomicBegin::Replay(response),
            Begin::Mismatch => AtomicBegin::Mismatch,
            Begin::InFlight { retry_after } => AtomicBegin::InFlight { retry_after },
        })
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
        // Handed on before this request followed, or since; `None`: ended without a value.
        let Ok(handed_on) = tokio::time::timeout_at(deadline.into(), leader.handed_on()).await
        else {
            tracing::debug!("in-process duplicate waited its bound: in flight");
            return in_flight();
        };
        if let Some(HandedOn::InFlight) = handed_on {
            return in_flight();
        }
        if let Some(HandedOn::Committed(record)) = handed_on
            && let Ok(answer) = decide(request, &record, on_expired).into_answer()
        {
            return Ok(answer.into());
        }
        self.begin_atomic_by(request, on_expired, Some(deadline))
            .await
    }
}

/// Core's table's writes in atomic mode: in the transaction whose first statement claimed.
/// Dropped with an answer or an error, it rolls the transaction back, then ends the turn
/// (fields drop in order), so that this process's duplicates look again.
struct InTransaction<'s, DB: Backend> {
    store: &'s SqlxStore<DB>,
    tx: Option<Transaction<'static, DB>>,
    turn: Option<Box<LocalTurn>>,
    /// What the claim met as the transaction began, for the table's first round.
    claimed: Option<TryClaim>,
}

impl<DB: Backend> ClaimWrites for InTransaction<'_, DB> {
    async fn try_claim(&mut self, request: &ClaimRequest) -> Result<TryClaim> {
        let tx = self.tx.as_mut().ok_or_else(ended)?;
        let claimed = match self.claimed.take() {
            Some(claimed) => claimed,
            None => DB::try_claim(tx, request).await?,
        };
        let claimed = self.store.seen_by_claim(claimed).await?;
        if let TryClaim::Claimed(_) = claimed {
            // A refusal drops the transaction and the turn with `self`.
            self.store.within_caps(tx, request, None).await?;
        }
        Ok(claimed)
    }

    async fn reclaim(&mut self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        let tx = self.tx.as_mut().ok_or_else(ended)?;
        let claim = DB::reclaim(tx, request, seen).await?;
        if claim.is_some()
            && let Some(turn) = &mut self.turn
        {
            turn.adopt(seen);
        }
        Ok(claim)
    }

    /// Completes and commits: the table completes only to answer at once (a stored
    /// `previous-attempt-unknown`).
    async fn complete(&mut self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let tx = self.tx.take().ok_or_else(ended)?;
        let atomic = AtomicClaim::join(tx, claim.clone(), self.turn.take());
        self.store.complete_atomic(atomic, response).await
    }
}

/// The table asked for a write after the transaction had committed.
fn ended() -> Error {
    Error::Backend("the claim's transaction has already committed".into())
}
