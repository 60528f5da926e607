//! Atomic mode's commit-time claim (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): the handler runs first, and the record,
//! already completed, is inserted as the transaction's last statement. The unique scope is
//! the arbiter: a concurrent duplicate runs speculatively, its insert waits for the first
//! transaction, and it rolls back and replays the winner (or commits, if the first rolled
//! back). One statement for the record instead of a claim and a completion.

use std::time::Instant;

use idemkey_core::{Answer, ClaimRequest, Error, RecordId, StoredResponse, Turn, decide};
use sqlx::Transaction;

use super::claim::{completed, rollback};
use super::coalescing::{Leader, LocalTurn};
use super::handler::{AtomicHandler, AtomicResponse};
use super::lookup::AtomicLookup;
use super::options::AtomicOptions;
use super::outcome::{AtomicError, Outcome, exhausted, retryable};
use crate::failpoints::Point;
use crate::{Backend, Folded, SqlxStore};

/// How one speculative transaction ended.
enum Step<R> {
    /// The request is answered.
    Done(Outcome<R>),
    /// A serialization failure or deadlock: run it again.
    Again,
    /// A live record holds the scope: claim-first's path decides (replay, mismatch, in
    /// flight, or a claim of a released record).
    Held,
}

type Attempt<R, E> = Result<Step<R>, AtomicError<E>>;

/// How the record's insert and the commit ended.
enum Committed {
    Yes,
    Again,
    Held,
    /// The insert failed, and a record committed by another request answers.
    Answered(Answer),
}

impl<DB: Backend> SqlxStore<DB> {
    /// [`SqlxStore::execute`] with [`crate::Strategy::CommitTime`].
    pub(crate) async fn execute_commit_time<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
    ) -> Result<Outcome<H::Response>, AtomicError<H::Error>> {
        let attempts = options.max_attempts.max(1);
        for _ in 0..attempts {
            let mut conn = None;
            if let Some(answer) = self.cached_answer(request, options.on_expired) {
                return Ok(answer.into());
            }
            if options.lookup {
                let mut looked_up = match self.connect_unless_led(request).await? {
                    Ok(conn) => conn,
                    Err(leader) => return self.follow(request, options, handler, leader).await,
                };
                self.hit(Point::BeforeLookup).await?;
                match self
                    .lookup_atomic_on(&mut looked_up, request, options.on_expired)
                    .await?
                {
                    AtomicLookup::Answer(answer) => return Ok(answer.into()),
                    // A released or abandoned record is claimed again under its id: that is
                    // claim-first's work, and a speculative run would only be rolled back.
                    AtomicLookup::Undecided => {
                        drop(looked_up);
                        return self
                            .execute_claim_first(request, options, handler, None)
                            .await;
                    }
                    AtomicLookup::Absent => {}
                }
                conn = DB::CLAIM_ON_LOOKUP_CONNECTION.then_some(looked_up);
            }
            self.hit(Point::AfterLookup).await?;
            let turn = match self.local.as_ref().map(|local| local.take(request)) {
                Some(Turn::Follow(leader) | Turn::Other(leader)) => {
                    drop(conn);
                    return self.follow(request, options, handler, leader).await;
                }
                Some(Turn::Lead(turn)) => Some(LocalTurn::new(turn, request)),
                None => None,
            };
            let tx = DB::begin_write_on(self, conn).await?;
            self.hit(Point::BeforeClaim).await?;
            match self.speculate(request, options, handler, tx, turn).await? {
                Step::Done(outcome) => return Ok(outcome),
                Step::Again => {}
                // The turn is dropped by now, so this process's duplicates look again too.
                Step::Held => {
                    return self
                        .execute_claim_first(request, options, handler, None)
                        .await;
                }
            }
        }
        Err(exhausted(attempts).into())
    }

    /// A duplicate in this process is already running: waits for its answer rather than run
    /// speculatively only to roll back; claims if it has none.
    async fn follow<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
        leader: Leader,
    ) -> Result<Outcome<H::Response>, AtomicError<H::Error>> {
        let begun = self
            .after_leader(request, options.on_expired, leader, None)
            .await?;
        self.execute_claim_first(request, options, handler, Some(begun))
            .await
    }

    /// Runs the handler in `tx`, then inserts the completed record and commits.
    async fn speculate<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
        tx: Transaction<'static, DB>,
        turn: Option<Box<LocalTurn>>,
    ) -> Attempt<H::Response, H::Error> {
        let (tx, result) = handler.call(tx).await;
        let response = match result {
            Ok(response) => response,
            Err(error) => {
                rollback(tx).await;
                if retryable::<DB>(&error) {
                    return Ok(Step::Again);
                }
                return match self.answer_after_failure(request, options).await {
                    Some(answer) => Ok(Step::Done(answer.into())),
                    None => Err(AtomicError::Handler(error)),
                };
            }
        };
        if response.retryable() {
            rollback(tx).await;
            return Ok(Step::Again);
        }
        if !response.stored(options.policy) {
            rollback(tx).await;
            let answer = self.answer_after_failure(request, options).await;
            return Ok(Step::Done(
                answer.map_or(Outcome::NotStored(response), Outcome::from),
            ));
        }
        let tx = tx.ok_or_else(|| Error::Backend("the handler lost the transaction".into()))?;
        let stored = response.to_stored();
        Ok(
            match self
                .commit_record(request, options, tx, &stored, turn)
                .await?
            {
                Committed::Yes => Step::Done(Outcome::Executed(response)),
                Committed::Again => Step::Again,
                Committed::Held => Step::Held,
                Committed::Answered(answer) => Step::Done(answer.into()),
            },
        )
    }

    /// Inserts the record completed with `stored` and commits; tells this process's
    /// duplicates once the commit is acknowledged.
    async fn commit_record(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        mut tx: Transaction<'static, DB>,
        stored: &StoredResponse,
        turn: Option<Box<LocalTurn>>,
    ) -> Result<Committed, Error> {
        let record_id = RecordId::new();
        self.hit(Point::BeforeComplete).await?;
        // Caps read the actor's usage between the insert and the commit: not folded then.
        let folded = if DB::FOLDS_COMMIT && !self.has_caps() {
            self.hit(Point::BeforeCommit).await?;
            DB::insert_completed_and_commit(&mut tx, request, record_id, stored).await
        } else {
            Folded::Unsupported
        };
        let committed = match folded {
            Folded::Committed => {
                // Queues the rollback of the empty transaction the driver still counts, and
                // hands the writer on: neither is awaited.
                drop(tx);
                Committed::Yes
            }
            Folded::CommitFailed(error) => committed_failure::<DB>(error)?,
            Folded::InsertFailed(error) => {
                rollback(Some(tx)).await;
                self.insert_failed(request, options, error).await?
            }
            Folded::Conflict => {
                self.insert_and_commit(request, options, tx, record_id, stored, false)
                    .await?
            }
            Folded::Unsupported => {
                self.insert_and_commit(request, options, tx, record_id, stored, true)
                    .await?
            }
        };
        if let Committed::Yes = committed {
            if let Some(turn) = turn {
                let claim = request.grant(record_id, 1, Instant::now(), None);
                turn.hand_on(&claim, stored);
            }
            self.remember(&request.scope, &completed(request, record_id, 1, stored));
        }
        Ok(committed)
    }

    /// The record's upsert, the caps' check and the commit, each a round trip of its own.
    /// `at_commit`: whether [`Point::BeforeCommit`] is still to be hit.
    async fn insert_and_commit(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        mut tx: Transaction<'static, DB>,
        record_id: RecordId,
        stored: &StoredResponse,
        at_commit: bool,
    ) -> Result<Committed, Error> {
        match DB::insert_completed(&mut tx, request, record_id, stored).await {
            Ok(true) => {
                // Over a cap, the handler's writes roll back with the record: not executed.
                if let Err(error) = self.within_caps(&mut tx, request, Some(stored)).await {
                    rollback(Some(tx)).await;
                    return Err(error);
                }
            }
            Ok(false) => {
                rollback(Some(tx)).await;
                return Ok(Committed::Held);
            }
            Err(error) => {
                rollback(Some(tx)).await;
                return self.insert_failed(request, options, error).await;
            }
        }
        if at_commit {
            self.hit(Point::BeforeCommit).await?;
        }
        match tx.commit().await {
            Ok(()) => Ok(Committed::Yes),
            Err(error) => committed_failure::<DB>(DB::commit_error(error)),
        }
    }

    /// After the record's insert failed (its transaction rolled back): run again, or the
    /// answer another request's record gives, or the error.
    async fn insert_failed(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        error: Error,
    ) -> Result<Committed, Error> {
        if retryable::<DB>(&error) {
            return Ok(Committed::Again);
        }
        match self.answer_after_failure(request, options).await {
            Some(answer) => Ok(Committed::Answered(answer)),
            None => Err(error),
        }
    }

    /// After a keyed transaction failed or rolled back: the answer a record committed by
    /// another request gives (a replay, a mismatch, in flight), if there is one. An error in
    /// the loser's own statements caused by the winner's writes (a unique violation) is so
    /// answered with the winner's response, never a 5xx. A failed lookup answers nothing:
    /// the request's own result stands.
    async fn answer_after_failure(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
    ) -> Option<Answer> {
        let looked_up = async {
            self.lookup_on(&mut *self.conn().await?, &request.scope)
                .await
        };
        match looked_up.await {
            Ok(Some(record)) => decide(request, &record, options.on_expired)
                .into_answer()
                .ok(),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "lookup after a rolled-back keyed transaction failed");
                None
            }
        }
    }
}

/// A failed `COMMIT`: run again if the database says so, otherwise the error.
fn committed_failure<DB: Backend>(error: Error) -> Result<Committed, Error> {
    if retryable::<DB>(&error) {
        Ok(Committed::Again)
    } else {
        Err(error)
    }
}
