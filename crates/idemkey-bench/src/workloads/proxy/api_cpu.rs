//! The CPU time of the API behind the proxy, which runs in this process: its HTTP thread's
//! and, for a SQLite upstream, its connections' threads (sqlx runs each SQLite connection on
//! a thread of its own), read around each round of a workload's sides. The proxy's own CPU
//! is the sides' "server CPU".

use std::time::Duration;

use crate::harness::cpu;
use crate::harness::runner::Observer;
use crate::harness::stats::SideSummary;

use super::upstream::Upstream;

/// The API's CPU time during each side's rounds.
pub(super) struct ApiCpu {
    /// Its threads, as they were when the workload began; `None` if unknown.
    threads: Option<Vec<u32>>,
    /// What the API is, for the note.
    kind: &'static str,
    start: Option<Duration>,
    sides: Vec<Duration>,
    /// Whether every reading succeeded: a thread that ended (a SQLite connection replaced)
    /// would take its time with it, and the note is then left out rather than wrong.
    complete: bool,
}

impl ApiCpu {
    /// Reads `upstream`'s threads around each round of `sides` sides.
    pub(super) fn new(upstream: &Upstream, sides: usize) -> Self {
        let threads = upstream.threads();
        Self {
            complete: threads.is_some(),
            threads,
            kind: upstream.kind.name(),
            start: None,
            sides: vec![Duration::ZERO; sides],
        }
    }

    fn read(&self) -> Option<Duration> {
        let mut total = Duration::ZERO;
        for tid in self.threads.as_ref()? {
            total += cpu::thread(*tid)?;
        }
        Some(total)
    }

    /// `the API's CPU µs/req: A (side), B (side)...`, if it was read throughout.
    pub(super) fn note(&self, sides: &[&SideSummary]) -> Option<String> {
        if !self.complete {
            return None;
        }
        let per_request: Vec<String> = self
            .sides
            .iter()
            .zip(sides)
            .map(|(spent, side)| {
                let spent = if side.requests == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.0}", spent.as_secs_f64() * 1e6 / side.requests as f64)
                };
                format!("{spent} ({})", side.name)
            })
            .collect();
        Some(format!(
            "the API behind the proxy ({} notes, threads of the bench), CPU µs/req: {}",
            self.kind,
            per_request.join(", ")
        ))
    }
}

impl Observer for ApiCpu {
    async fn before(&mut self, _side: usize) {
        self.start = self.read();
    }

    async fn after(&mut self, side: usize) {
        match (self.start.take(), self.read()) {
            (Some(start), Some(now)) => self.sides[side] += now.saturating_sub(start),
            _ => self.complete = false,
        }
    }
}
