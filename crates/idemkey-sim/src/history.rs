//! What happened in a run, in order: requests, answers, store calls, executions, effects.

use std::fmt;

use sha2::{Digest, Sha256};

/// An execution: a record (numbered in order of first appearance) and a fencing token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Exec {
    /// The record's number in this run (record ids are random; numbers are not).
    pub record: u32,
    /// The claim's fencing token.
    pub token: i64,
}

/// A record as a store call returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Which record, under which token.
    pub exec: Exec,
    /// Its state.
    pub state: SeenState,
}

/// The state of a record as the store reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeenState {
    /// In flight, with this much of its lease left (0: expired).
    InFlight {
        /// Ms left on the lease, by the store's clock.
        lease_left_ms: u64,
    },
    /// Released.
    Released,
    /// Completed with this response.
    Completed(Answer),
}

/// A response as stored or delivered: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The body, as text (lossy for non-UTF-8, which the simulation never produces).
    pub body: String,
}

/// A store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `lookup`.
    Lookup,
    /// `try_claim`.
    TryClaim,
    /// `reclaim`.
    Reclaim,
    /// `complete`.
    Complete,
    /// `release`.
    Release,
    /// `discard`.
    Discard,
    /// `extend`.
    Extend,
    /// `sweep`.
    Sweep,
}

/// What a store call did to (or read from) the store: the inner store's own result, whatever
/// reply the caller got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Failed before reaching the store: nothing happened.
    NotApplied,
    /// A new record, claimed.
    Claimed {
        /// The claim.
        exec: Exec,
        /// Its lease.
        lease_ms: u64,
        /// Its retention.
        retention_ms: u64,
    },
    /// A live record was read (by a lookup or a claim that found one).
    Read(Option<Seen>),
    /// Claimed again under the next token.
    Reclaimed {
        /// The new claim.
        exec: Exec,
        /// Its lease.
        lease_ms: u64,
        /// Its retention.
        retention_ms: u64,
    },
    /// `reclaim` found the record changed.
    NotReclaimed,
    /// `complete`, `release`, `discard` or `extend` applied for the claim.
    Settled {
        /// The stored response, for `complete`.
        stored: Option<Answer>,
    },
    /// Swept this many records.
    Swept(u64),
    /// The store refused the call (`Fenced` and the like): nothing changed.
    Refused(String),
}

/// The reply the caller got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The store's own reply.
    Delivered,
    /// Failed before applying.
    Unavailable,
    /// Applied, then the reply was lost as `OutcomeUnknown`.
    LostOutcomeUnknown,
    /// Applied, then the reply was lost as `Unavailable`.
    LostUnavailable,
}

/// One event of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A client sends an attempt.
    Request {
        /// The attempt's number (also its `x-request-id`).
        attempt: u64,
        /// Actor number.
        actor: u8,
        /// Key number.
        key: u8,
        /// The body sent.
        body: String,
        /// The instance it went to.
        instance: u8,
        /// Whether it is part of the final check, after faults stopped.
        healing: bool,
    },
    /// A client got an answer.
    Response {
        /// The attempt.
        attempt: u64,
        /// What it got.
        answer: Answer,
        /// Whether it carried `Idempotent-Replayed: true`.
        replayed: bool,
    },
    /// A client gave up waiting.
    Timeout {
        /// The attempt.
        attempt: u64,
    },
    /// A store call.
    Store {
        /// The calling instance (the sweeper is the last one).
        instance: u8,
        /// The operation.
        op: OpKind,
        /// `actor/key` for calls on one scope.
        scope: Option<String>,
        /// The claim, for calls made under one.
        claim: Option<Exec>,
        /// What it did.
        applied: Applied,
        /// What the caller heard.
        reply: Reply,
    },
    /// A handler started under a claim.
    HandlerStart {
        /// The execution.
        exec: Exec,
        /// What will become of it.
        fate: String,
    },
    /// A handler called the external service.
    Effect {
        /// The execution.
        exec: Exec,
        /// The effect's number at the external service.
        effect: u64,
        /// Whether the call made the effect (`false`: deduplicated by its key).
        fresh: bool,
    },
    /// A handler was paused until the given time.
    Paused {
        /// The execution.
        exec: Exec,
        /// Until when (virtual ms).
        until_ms: u64,
    },
    /// A handler was killed.
    Killed {
        /// The execution.
        exec: Exec,
    },
    /// A handler answered.
    HandlerEnd {
        /// The execution.
        exec: Exec,
        /// Its status.
        status: u16,
    },
    /// Faults and fates stop; what follows checks that every key settles.
    Heal,
}

/// One event and when it happened (virtual ms since the start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// When, in virtual ms since the start of the run.
    pub at_ms: u64,
    /// What.
    pub event: Event,
}

/// A run's history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The events, in the order they happened.
    pub entries: Vec<Entry>,
}

impl History {
    /// A digest of the whole history: equal digests mean the same run.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for entry in &self.entries {
            hasher.update(format!("{entry:?}\n").as_bytes());
        }
        hex::encode(hasher.finalize())
    }

    /// How many attempts the clients sent.
    pub fn requests(&self) -> usize {
        self.count(|event| matches!(event, Event::Request { .. }))
    }

    /// How many events match `pred`.
    pub fn count(&self, pred: impl Fn(&Event) -> bool) -> usize {
        self.entries
            .iter()
            .filter(|entry| pred(&entry.event))
            .count()
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for entry in &self.entries {
            writeln!(f, "{:>9} ms  {:?}", entry.at_ms, entry.event)?;
        }
        Ok(())
    }
}
