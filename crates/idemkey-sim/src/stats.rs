//! Counts of what a run exercised, to show that the seeds reach the interesting cases.

use std::collections::HashSet;
use std::fmt;
use std::ops::AddAssign;

use crate::history::{Applied, Event, History, OpKind, Reply};

/// How often each interesting thing happened, over one run or many.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Runs counted.
    pub runs: u64,
    /// Attempts sent.
    pub requests: u64,
    /// 2xx answers executed by the attempt's own claim.
    pub executed: u64,
    /// Replayed answers.
    pub replayed: u64,
    /// 409 `request-in-flight`.
    pub in_flight: u64,
    /// 422 `key-reused`.
    pub key_reused: u64,
    /// Other 5xx answers (store unavailable, outcome unknown, handler 503).
    pub server_errors: u64,
    /// Attempts the client stopped waiting for.
    pub timeouts: u64,
    /// Claims taken again (after a release or over an expired lease).
    pub reclaims: u64,
    /// Records created for a scope that had one before (its retention ran out).
    pub records_after_expiry: u64,
    /// Executors paused.
    pub paused: u64,
    /// Executors killed.
    pub killed: u64,
    /// Completions, releases and renewals refused to a stale owner.
    pub fenced: u64,
    /// Writes applied whose reply was lost.
    pub lost_replies: u64,
    /// Sweeps that deleted something.
    pub sweeps: u64,
    /// External calls deduplicated by their derived key (a re-execution of a record).
    pub deduplicated: u64,
}

impl Stats {
    /// The counts of one history.
    pub fn of(history: &History) -> Self {
        let mut stats = Self {
            runs: 1,
            ..Self::default()
        };
        let mut scopes = HashSet::new();
        for entry in &history.entries {
            stats.event(&entry.event, &mut scopes);
        }
        stats
    }

    fn event(&mut self, event: &Event, scopes: &mut HashSet<String>) {
        match event {
            Event::Request { .. } => self.requests += 1,
            Event::Response {
                answer, replayed, ..
            } => match (answer.status, replayed) {
                (_, true) => self.replayed += 1,
                (200..300, false) => self.executed += 1,
                (409, _) => self.in_flight += 1,
                (422, _) => self.key_reused += 1,
                (500.., _) => self.server_errors += 1,
                _ => {}
            },
            Event::Timeout { .. } => self.timeouts += 1,
            Event::Paused { .. } => self.paused += 1,
            Event::Killed { .. } => self.killed += 1,
            Event::Effect { fresh: false, .. } => self.deduplicated += 1,
            Event::Store {
                op,
                scope,
                applied,
                reply,
                ..
            } => self.store(*op, scope.as_deref(), applied, *reply, scopes),
            _ => {}
        }
    }

    fn store(
        &mut self,
        op: OpKind,
        scope: Option<&str>,
        applied: &Applied,
        reply: Reply,
        scopes: &mut HashSet<String>,
    ) {
        if matches!(reply, Reply::LostOutcomeUnknown | Reply::LostUnavailable) {
            self.lost_replies += 1;
        }
        match applied {
            Applied::Claimed { .. } => {
                let scope = scope.unwrap_or_default().to_owned();
                if !scopes.insert(scope) {
                    self.records_after_expiry += 1;
                }
            }
            Applied::Reclaimed { .. } => self.reclaims += 1,
            Applied::Refused(_) if op != OpKind::Lookup => self.fenced += 1,
            Applied::Swept(n) if *n > 0 => self.sweeps += 1,
            _ => {}
        }
    }
}

impl AddAssign for Stats {
    fn add_assign(&mut self, other: Self) {
        let Self {
            runs,
            requests,
            executed,
            replayed,
            in_flight,
            key_reused,
            server_errors,
            timeouts,
            reclaims,
            records_after_expiry,
            paused,
            killed,
            fenced,
            lost_replies,
            sweeps,
            deduplicated,
        } = other;
        self.runs += runs;
        self.requests += requests;
        self.executed += executed;
        self.replayed += replayed;
        self.in_flight += in_flight;
        self.key_reused += key_reused;
        self.server_errors += server_errors;
        self.timeouts += timeouts;
        self.reclaims += reclaims;
        self.records_after_expiry += records_after_expiry;
        self.paused += paused;
        self.killed += killed;
        self.fenced += fenced;
        self.lost_replies += lost_replies;
        self.sweeps += sweeps;
        self.deduplicated += deduplicated;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} runs, {} requests: {} executed, {} replayed, {} in flight (409), {} key reused \
             (422), {} 5xx, {} timeouts; {} reclaims, {} records after expiry, {} paused, {} \
             killed, {} fenced, {} lost replies, {} sweeps, {} effects deduplicated",
            self.runs,
            self.requests,
            self.executed,
            self.replayed,
            self.in_flight,
            self.key_reused,
            self.server_errors,
            self.timeouts,
            self.reclaims,
            self.records_after_expiry,
            self.paused,
            self.killed,
            self.fenced,
            self.lost_replies,
            self.sweeps,
            self.deduplicated
        )
    }
}
