//! The decision table of behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions), shared by every store and both modes.

use std::future::Future;
use std::time::Duration;

use crate::{
    Claim, ClaimRequest, Error, ExpiredLease, Problem, ProblemKind, Record, RecordState, Result,
    Store, StoredResponse, TryClaim,
};

/// What an existing live record means for a request (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Another request used the key: 422 `key-reused`; the handler does not run.
    Mismatch,
    /// Replay the stored response; the handler does not run.
    Replay(StoredResponse),
    /// Another executor holds a live lease: 409 `request-in-flight`, or wait.
    InFlight {
        /// What is left of the original's lease, in whole seconds (at least one): by then its
        /// answer is stored or its lease expired. The latest a retry need wait; a front end
        /// may send the client back sooner, when the answer is likely.
        retry_after: Duration,
    },
    /// Claim the record again under its id: it was released, or its executor is presumed
    /// dead and the route takes over.
    Reclaim,
    /// The executor is presumed dead and the route completes the record with a stored
    /// 500 `previous-attempt-unknown`.
    PreviousAttemptUnknown,
}

/// Decides what `record` means for `request`. Fingerprint and version come first, in every
/// state.
pub fn decide(request: &ClaimRequest, record: &Record, on_expired: ExpiredLease) -> Decision {
    if !request.matches(record) {
        return Decision::Mismatch;
    }
    match &record.state {
        RecordState::Completed(response) => Decision::Replay(response.clone()),
        RecordState::Released => Decision::Reclaim,
        RecordState::InFlight { lease_remaining } if !lease_remaining.is_zero() => {
            Decision::InFlight {
                retry_after: retry_after(*lease_remaining),
            }
        }
        RecordState::InFlight { .. } => match on_expired {
            ExpiredLease::TakeOver => Decision::Reclaim,
            ExpiredLease::PreviousAttemptUnknown => Decision::PreviousAttemptUnknown,
        },
    }
}

/// Whole seconds, at least one: the value of a `Retry-After` header.
pub fn retry_after(remaining: Duration) -> Duration {
    Duration::from_secs(remaining.as_secs_f64().ceil().max(1.0) as u64)
}

/// What a lease-mode request does, once the store has been asked (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).
#[derive(Clone, Debug)]
pub enum Begin {
    /// This request holds the claim: run the handler, then complete or release.
    Execute(Claim),
    /// Replay this stored response.
    Replay(StoredResponse),
    /// 422 `key-reused`.
    Mismatch,
    /// 409 `request-in-flight`.
    InFlight {
        /// What is left of the original's lease, in whole seconds (at least one): by then its
        /// answer is stored or its lease expired. The latest a retry need wait; a front end
        /// may send the client back sooner, when the answer is likely.
        retry_after: Duration,
    },
}

/// How many times a request re-reads a record that changes under it before giving up.
const MAX_ROUNDS: usize = 8;

/// Runs the decision table against a lease-mode store: claim, or decide from the record.
///
/// A read-only lookup comes first, so replays, mismatches and in-flight answers never take
/// a write lock; the claim is still the final arbiter (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)).
pub async fn begin<S: Store>(
    store: &S,
    request: &ClaimRequest,
    on_expired: ExpiredLease,
) -> Result<Begin> {
    if let Some(answer) = lookup(store, request, on_expired).await? {
        return Ok(answer);
    }
    claim(store, request, on_expired).await
}

/// The first step of [`begin`]: the answer the scope's record gives without a write (a
/// replay, a mismatch, in flight), if the store looks first and there is one.
pub async fn lookup<S: Store>(
    store: &S,
    request: &ClaimRequest,
    on_expired: ExpiredLease,
) -> Result<Option<Begin>> {
    if store.lookup_first()
        && let Some(record) = store.lookup(&request.scope).await?
        && let Ok(answer) = decide(request, &record, on_expired).into_answer()
    {
        return Ok(Some(answer.into()));
    }
    Ok(None)
}

/// The second step of [`begin`]: claims the scope, or answers from the record that holds it.
pub async fn claim<S: Store>(
    store: &S,
    request: &ClaimRequest,
    on_expired: ExpiredLease,
) -> Result<Begin> {
    claim_by(&mut Leased(store), request, on_expired, MAX_ROUNDS).await
}

/// The writes the claim's table makes, wherever they run: a lease-mode [`Store`]'s own short
/// writes, or atomic mode's statements in the transaction whose first statement claimed.
pub trait ClaimWrites: Send {
    /// Claims the scope, or returns its live record (see [`Store::try_claim`]).
    fn try_claim(
        &mut self,
        request: &ClaimRequest,
    ) -> impl Future<Output = Result<TryClaim>> + Send;

    /// Claims `seen` again under its id, unless it changed (see [`Store::reclaim`]).
    fn reclaim(
        &mut self,
        request: &ClaimRequest,
        seen: &Record,
    ) -> impl Future<Output = Result<Option<Claim>>> + Send;

    /// Stores `response` in the claimed record (see [`Store::complete`]).
    fn complete(
        &mut self,
        claim: &Claim,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// [`claim`] with `writes`: claims the scope, or decides from the record that
/// holds it, reading it again at most `rounds` times when it changes before it is claimed
/// again (then [`Error::Contention`]). Atomic mode passes one round: its transaction holds
/// the record, which cannot change under it.
pub async fn claim_by<C: ClaimWrites>(
    writes: &mut C,
    request: &ClaimRequest,
    on_expired: ExpiredLease,
    rounds: usize,
) -> Result<Begin> {
    for _ in 0..rounds {
        let record = match writes.try_claim(request).await? {
            TryClaim::Claimed(claim) => return Ok(Begin::Execute(claim)),
            TryClaim::Existing(record) => record,
        };
        let decision = match decide(request, &record, on_expired).into_answer() {
            Ok(answer) => return Ok(answer.into()),
            Err(decision) => decision,
        };
        // Reclaiming fails only when the record changed in between: read it again.
        let Some(claim) = writes.reclaim(request, &record).await? else {
            continue;
        };
        if decision == Decision::Reclaim {
            return Ok(Begin::Execute(claim));
        }
        let response = previous_attempt_unknown();
        writes.complete(&claim, &response).await?;
        return Ok(Begin::Replay(response));
    }
    Err(Error::Contention)
}

/// A lease-mode store as the table's [`ClaimWrites`].
struct Leased<'s, S>(&'s S);

impl<S: Store> ClaimWrites for Leased<'_, S> {
    async fn try_claim(&mut self, request: &ClaimRequest) -> Result<TryClaim> {
        self.0.try_claim(request).await
    }

    async fn reclaim(&mut self, request: &ClaimRequest, seen: &Record) -> Result<Option<Claim>> {
        self.0.reclaim(request, seen).await
    }

    async fn complete(&mut self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        self.0.complete(claim, response).await
    }
}

/// An answer that needs no write: the request does not execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Replay this stored response.
    Replay(StoredResponse),
    /// 422 `key-reused`.
    Mismatch,
    /// 409 `request-in-flight`.
    InFlight {
        /// What is left of the original's lease, in whole seconds (at least one): by then its
        /// answer is stored or its lease expired. The latest a retry need wait; a front end
        /// may send the client back sooner, when the answer is likely.
        retry_after: Duration,
    },
}

impl From<Answer> for Begin {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Replay(response) => Self::Replay(response),
            Answer::Mismatch => Self::Mismatch,
            Answer::InFlight { retry_after } => Self::InFlight { retry_after },
        }
    }
}

impl Decision {
    /// The answer to the request when the decision needs no write, or the decision back.
    pub fn into_answer(self) -> Result<Answer, Self> {
        match self {
            Self::Mismatch => Ok(Answer::Mismatch),
            Self::Replay(response) => Ok(Answer::Replay(response)),
            Self::InFlight { retry_after } => Ok(Answer::InFlight { retry_after }),
            Self::Reclaim | Self::PreviousAttemptUnknown => Err(self),
        }
    }
}

/// The stored 500 that tells a client its first attempt may or may not have taken effect.
pub fn previous_attempt_unknown() -> StoredResponse {
    Problem::new(ProblemKind::PreviousAttemptUnknown)
        .detail(
            "an earlier attempt with this key stopped without a result: it may or may not have \
             taken effect; check before sending a new request with a new key",
        )
        .to_stored()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fingerprint, Key, Operation, RecordId};

    fn request() -> ClaimRequest {
        let key: Key = "k".parse().unwrap();
        let fp = Fingerprint::builder("POST", "/").body(b"a");
        ClaimRequest::new("actor", Operation::new("op", "v1"), key, fp)
    }

    fn record(state: RecordState) -> Record {
        Record {
            record_id: RecordId::new(),
            version: "v1".into(),
            fingerprint: request().fingerprint,
            token: 1,
            state,
            request_id: None,
        }
    }

    #[test]
    fn mismatch_comes_first_in_every_state() {
        let states = [
            RecordState::InFlight {
                lease_remaining: Duration::from_secs(5),
            },
            RecordState::InFlight {
                lease_remaining: Duration::ZERO,
            },
            RecordState::Released,
            RecordState::Completed(StoredResponse::new(201, "x")),
        ];
        for state in states {
            let mut other_body = record(state.clone());
            other_body.fingerprint = Fingerprint::builder("POST", "/").body(b"b");
            assert_eq!(
                decide(&request(), &other_body, ExpiredLease::TakeOver),
                Decision::Mismatch
            );
            let mut other_version = record(state);
            other_version.version = "v0".into();
            assert_eq!(
                decide(&request(), &other_version, ExpiredLease::TakeOver),
                Decision::Mismatch
            );
        }
    }

    #[test]
    fn compatible_versions_replay() {
        let mut req = request();
        req.operation = Operation::new("op", "v2").compatible_with("v1");
        let rec = record(RecordState::Completed(StoredResponse::new(201, "x")));
        assert!(matches!(
            decide(&req, &rec, ExpiredLease::TakeOver),
            Decision::Replay(_)
        ));
    }

    #[test]
    fn in_flight_rows() {
        let alive = record(RecordState::InFlight {
            lease_remaining: Duration::from_millis(1500),
        });
        assert_eq!(
            decide(&request(), &alive, ExpiredLease::TakeOver),
            Decision::InFlight {
                retry_after: Duration::from_secs(2)
            }
        );
        let dead = record(RecordState::InFlight {
            lease_remaining: Duration::ZERO,
        });
        assert_eq!(
            decide(&request(), &dead, ExpiredLease::TakeOver),
            Decision::Reclaim
        );
        assert_eq!(
            decide(&request(), &dead, ExpiredLease::PreviousAttemptUnknown),
            Decision::PreviousAttemptUnknown
        );
        assert_eq!(
            decide(
                &request(),
                &record(RecordState::Released),
                ExpiredLease::PreviousAttemptUnknown
            ),
            Decision::Reclaim
        );
    }

    /// Writes that always meet `record`, and claim it again unless it is `changing`.
    struct Scripted {
        record: Record,
        changing: bool,
        tries: usize,
        completed: Option<StoredResponse>,
    }

    impl Scripted {
        fn new(state: RecordState, changing: bool) -> Self {
            let record = record(state);
            Self {
                record,
                changing,
                tries: 0,
                completed: None,
            }
        }
    }

    impl ClaimWrites for Scripted {
        async fn try_claim(&mut self, _request: &ClaimRequest) -> Result<TryClaim> {
            self.tries += 1;
            Ok(TryClaim::Existing(self.record.clone()))
        }

        async fn reclaim(
            &mut self,
            request: &ClaimRequest,
            seen: &Record,
        ) -> Result<Option<Claim>> {
            let now = std::time::Instant::now();
            let claim = request.grant(seen.record_id, seen.token + 1, now, Some(seen));
            Ok((!self.changing).then_some(claim))
        }

        async fn complete(&mut self, _claim: &Claim, response: &StoredResponse) -> Result<()> {
            self.completed = Some(response.clone());
            Ok(())
        }
    }

    fn expired() -> RecordState {
        RecordState::InFlight {
            lease_remaining: Duration::ZERO,
        }
    }

    #[tokio::test]
    async fn a_record_that_keeps_changing_is_contention_after_the_rounds() {
        for rounds in [1, 3] {
            let mut writes = Scripted::new(expired(), true);
            let begun = claim_by(&mut writes, &request(), ExpiredLease::TakeOver, rounds).await;
            assert!(matches!(begun, Err(Error::Contention)));
            assert_eq!(writes.tries, rounds);
        }
    }

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_or_completed_unknown() {
        let mut writes = Scripted::new(expired(), false);
        let begun = claim_by(&mut writes, &request(), ExpiredLease::TakeOver, 1).await;
        assert!(matches!(begun, Ok(Begin::Execute(claim)) if claim.token == 2));
        assert_eq!(writes.completed, None);

        let unknown = ExpiredLease::PreviousAttemptUnknown;
        let begun = claim_by(&mut writes, &request(), unknown, 1).await;
        let expected = previous_attempt_unknown();
        assert!(matches!(begun, Ok(Begin::Replay(response)) if response == expected));
        assert_eq!(writes.completed, Some(expected));
    }

    #[tokio::test]
    async fn a_completed_record_replays_without_a_write() {
        let stored = StoredResponse::new(201, "x");
        let mut writes = Scripted::new(RecordState::Completed(stored.clone()), true);
        let begun = claim_by(&mut writes, &request(), ExpiredLease::TakeOver, 3).await;
        assert!(matches!(begun, Ok(Begin::Replay(response)) if response == stored));
        assert_eq!((writes.tries, writes.completed), (1, None));
    }
}
