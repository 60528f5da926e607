//! The catalogue of cases: stable ids and one-line explanations.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The stable id of one conformance case (its kebab-case name is used in reports and `--case`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CaseId {
    /// An identical retry replays the same status and body.
    Replay,
    /// The replay keeps status, `Location`, `Content-Type` and the body bytes.
    ReplayFidelity,
    /// JSON with another key order and whitespace is the same request.
    JsonEquivalence,
    /// A request whose response is never read, then retried, creates one resource.
    LostResponse,
    /// The same key with a different body is rejected.
    Mismatch,
    /// The same key under another actor is another request.
    CrossActor,
    /// Identical requests released together create one resource.
    ConcurrentBurst,
    /// A rejected request is not stored under its key.
    FailureNotStored,
    /// A request without a key is rejected with 400.
    MissingKey,
    /// Malformed keys are rejected with 400.
    InvalidKeys,
}

impl CaseId {
    /// Every case, in the order the checker runs them.
    pub const ALL: [CaseId; 10] = [
        CaseId::Replay,
        CaseId::ReplayFidelity,
        CaseId::JsonEquivalence,
        CaseId::LostResponse,
        CaseId::Mismatch,
        CaseId::CrossActor,
        CaseId::ConcurrentBurst,
        CaseId::FailureNotStored,
        CaseId::MissingKey,
        CaseId::InvalidKeys,
    ];

    /// The stable kebab-case id, e.g. `concurrent-burst`.
    pub fn as_str(self) -> &'static str {
        match self {
            CaseId::Replay => "replay",
            CaseId::ReplayFidelity => "replay-fidelity",
            CaseId::JsonEquivalence => "json-equivalence",
            CaseId::LostResponse => "lost-response",
            CaseId::Mismatch => "mismatch",
            CaseId::CrossActor => "cross-actor",
            CaseId::ConcurrentBurst => "concurrent-burst",
            CaseId::FailureNotStored => "failure-not-stored",
            CaseId::MissingKey => "missing-key",
            CaseId::InvalidKeys => "invalid-keys",
        }
    }

    /// What the case checks, in one line.
    pub fn explanation(self) -> &'static str {
        match self {
            CaseId::Replay => "an identical retry replays the same status and body",
            CaseId::ReplayFidelity => {
                "the replay keeps status, Location, Content-Type and the body bytes"
            }
            CaseId::JsonEquivalence => {
                "JSON with another key order and whitespace is a replay, not a new request"
            }
            CaseId::LostResponse => {
                "a request whose response is lost, then retried, converges on one resource"
            }
            CaseId::Mismatch => "the same key with a different body is rejected (422)",
            CaseId::CrossActor => {
                "the same key under another actor creates a separate resource, never a replay"
            }
            CaseId::ConcurrentBurst => {
                "identical requests released together create exactly one resource"
            }
            CaseId::FailureNotStored => {
                "a rejected request is not stored: the same key then succeeds"
            }
            CaseId::MissingKey => "a request without a key is rejected with 400",
            CaseId::InvalidKeys => {
                "empty, over-long and control-character keys are rejected with 400"
            }
        }
    }
}

impl fmt::Display for CaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::CaseId;

    #[test]
    fn ids_agree_with_serde_and_clap() {
        for id in CaseId::ALL {
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, format!("\"{id}\""));
            let parsed = CaseId::from_str(id.as_str(), false).unwrap();
            assert_eq!(parsed, id);
        }
    }
}
