//! The conformance cases. Each takes the shared [`Ctx`] and returns a [`Finding`].

mod actor;
mod burst;
mod failure;
mod keys;
mod lost;
mod mismatch;
mod replay;

use crate::{
    CaseId, Verdict,
    context::{Ctx, RequestError},
    exchange::Exchange,
};

/// A case's verdict, its one line of evidence and informational notes.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) verdict: Verdict,
    pub(crate) evidence: String,
    pub(crate) notes: Vec<String>,
}

impl Finding {
    pub(crate) fn pass(evidence: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Pass,
            evidence: evidence.into(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn fail(evidence: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Fail,
            evidence: evidence.into(),
            notes: Vec::new(),
        }
    }

    pub(crate) fn skipped(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            verdict: Verdict::Skipped {
                reason: reason.clone(),
            },
            evidence: reason,
            notes: Vec::new(),
        }
    }

    #[must_use]
    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// Why a case ended early: a verdict reached on the way, or a request without an answer.
#[derive(Debug)]
pub(crate) enum Stop {
    Verdict(Finding),
    Request(RequestError),
}

impl From<RequestError> for Stop {
    fn from(error: RequestError) -> Self {
        Stop::Request(error)
    }
}

/// What a case function returns.
pub(crate) type Outcome = Result<Finding, Stop>;

/// Ends the case as failed with `evidence`.
pub(crate) fn failed(evidence: impl Into<String>) -> Stop {
    Stop::Verdict(Finding::fail(evidence))
}

/// Ends the case as failed unless `condition` holds.
pub(crate) fn ensure(condition: bool, evidence: impl FnOnce() -> String) -> Result<(), Stop> {
    if condition {
        Ok(())
    } else {
        Err(failed(evidence()))
    }
}

/// Ends the case as failed unless the `what` request succeeded (2xx).
pub(crate) fn expect_success(response: &Exchange, what: &str) -> Result<(), Stop> {
    ensure(response.is_success(), || {
        format!("{what} answered {}", response.summary())
    })
}

/// ` (id X)` when the response names a resource, else nothing.
pub(crate) fn id_suffix(response: &Exchange) -> String {
    response
        .resource()
        .map(|id| format!(" (id {id})"))
        .unwrap_or_default()
}

/// Runs case `id`; a request without an answer fails the case.
pub(crate) async fn run(id: CaseId, ctx: &Ctx) -> Finding {
    let outcome = match id {
        CaseId::Replay => replay::replay(ctx).await,
        CaseId::ReplayFidelity => replay::fidelity(ctx).await,
        CaseId::JsonEquivalence => replay::json_equivalence(ctx).await,
        CaseId::LostResponse => lost::lost_response(ctx).await,
        CaseId::Mismatch => mismatch::mismatch(ctx).await,
        CaseId::CrossActor => actor::cross_actor(ctx).await,
        CaseId::ConcurrentBurst => burst::concurrent_burst(ctx).await,
        CaseId::FailureNotStored => failure::failure_not_stored(ctx).await,
        CaseId::MissingKey => keys::missing_key(ctx).await,
        CaseId::InvalidKeys => keys::invalid_keys(ctx).await,
    };
    match outcome {
        Ok(finding) | Err(Stop::Verdict(finding)) => finding,
        Err(Stop::Request(error)) => Finding::fail(format!("request failed: {error}")),
    }
}
