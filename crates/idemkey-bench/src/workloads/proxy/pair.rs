//! What every proxy workload shares: its pair of sides run with the API's CPU time observed
//! around each, the report of the pair, and the per-actor caps that the proxy and the
//! `proxy-store` workload's store are both given.

use std::sync::Arc;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::harness::cpu;
use crate::harness::report::WorkloadReport;
use crate::harness::runner::{self, Observer, Op, Worker};
use crate::harness::stats::SideSummary;

use super::upstream::Upstream;

/// The per-actor record cap given to the proxy: about a billion, never reached by a run,
/// while the check still runs as it does under the default cap.
pub(super) const RECORDS_CAP: &str = "1000000000";

/// The per-actor byte cap given to the proxy: 1 TiB, never reached by a run.
pub(super) const BYTES_CAP: &str = "1099511627776";

pub(super) fn report(
    name: &'static str,
    a: SideSummary,
    b: SideSummary,
    notes: Vec<String>,
) -> WorkloadReport {
    let mut report = WorkloadReport::new(name, vec![a, b]);
    report.notes = notes;
    report
}

/// Runs `a` against `b` in alternating rounds, the API's CPU time observed around each;
/// the sides' summaries under `names`, and a note of the API's CPU per request.
pub(super) async fn pair<A: Op, B: Op>(
    ctx: &Ctx,
    workload: &str,
    upstream: &Upstream,
    a: &Arc<A>,
    b: &Arc<B>,
    workers: &mut Vec<Worker>,
    names: [&str; 2],
) -> (SideSummary, SideSummary, Vec<String>) {
    let bar = ctx.bar(workload, ctx.rounds);
    let mut api = ApiCpu::new(upstream.tid);
    let (a, b) =
        runner::pair_observed(a, b, workers, (ctx.budget, ctx.rounds), &bar, &mut api).await;
    bar.finish_and_clear();
    let (a, b) = (a[0].summary(names[0]), b[0].summary(names[1]));
    let notes = api.note(&[&a, &b]).into_iter().collect();
    (a, b, notes)
}

/// The API's CPU time (its thread's, in this process) during each side's rounds.
struct ApiCpu {
    tid: Option<u32>,
    start: Option<Duration>,
    sides: [Duration; 2],
    /// Whether every reading succeeded.
    complete: bool,
}

impl ApiCpu {
    fn new(tid: Option<u32>) -> Self {
        Self {
            tid,
            start: None,
            sides: [Duration::ZERO; 2],
            complete: tid.is_some(),
        }
    }

    fn read(&self) -> Option<Duration> {
        cpu::thread(self.tid?)
    }

    /// `the API's CPU µs/req: A, B`, if it was read throughout.
    fn note(&self, sides: &[&SideSummary; 2]) -> Option<String> {
        if !self.complete {
            return None;
        }
        let per_request = |spent: Duration, side: &SideSummary| {
            if side.requests == 0 {
                "-".to_owned()
            } else {
                format!("{:.0}", spent.as_secs_f64() * 1e6 / side.requests as f64)
            }
        };
        Some(format!(
            "the API behind the proxy (a thread of the bench), CPU µs/req: {} ({}), {} ({})",
            per_request(self.sides[0], sides[0]),
            sides[0].name,
            per_request(self.sides[1], sides[1]),
            sides[1].name,
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
