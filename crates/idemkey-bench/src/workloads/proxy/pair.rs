//! What every proxy workload shares: its sides run in alternating rounds with the API's CPU
//! time observed around each (two sides, or three for `proxy-create`), the names of its
//! report and ratios by upstream, and the per-actor caps that the proxy and the
//! `proxy-store` workload's store are both given.

use std::borrow::Cow;
use std::sync::Arc;

use crate::ctx::Ctx;
use crate::harness::report::WorkloadReport;
use crate::harness::runner::{self, Observer, Op, Worker};
use crate::harness::stats::{Samples, SideSummary};

use super::api_cpu::ApiCpu;
use super::upstream::{Upstream, UpstreamKind};

/// The per-actor record cap given to the proxy: about a billion, never reached by a run,
/// while the check still runs as it does under the default cap.
pub(super) const RECORDS_CAP: &str = "1000000000";

/// The per-actor byte cap given to the proxy: 1 TiB, never reached by a run.
pub(super) const BYTES_CAP: &str = "1099511627776";

/// Workload `name`'s report in front of `upstream`: named as before in front of the
/// in-memory API, so that earlier reports and scripts still read it, and after its upstream
/// otherwise.
pub(super) fn report(
    name: &'static str,
    upstream: &Upstream,
    sides: Vec<SideSummary>,
    notes: Vec<String>,
) -> WorkloadReport {
    let name: Cow<'static, str> = match upstream.kind {
        UpstreamKind::Memory => name.into(),
        kind => format!("{name} ({})", kind.name()).into(),
    };
    let mut report = WorkloadReport::new(name, sides);
    report.notes = notes;
    report
}

/// Ratio `name` measured in front of `upstream`, named as [`report`] names workloads.
pub(super) fn ratio_name(name: &str, upstream: &Upstream) -> String {
    match upstream.kind {
        UpstreamKind::Memory => name.to_owned(),
        kind => format!("{name}, {} API", kind.name()),
    }
}

/// Runs `a` against `b` in alternating rounds, the API's CPU time observed around each;
/// the sides' summaries under `names`, and a note of the API's CPU per request.
pub(super) async fn pair<A: Op, B: Op>(
    ctx: &Ctx,
    workload: &str,
    upstream: &Upstream,
    (a, b): (&Arc<A>, &Arc<B>),
    workers: &mut Vec<Worker>,
    names: [&str; 2],
) -> (SideSummary, SideSummary, Vec<String>) {
    let bar = ctx.bar(workload, ctx.rounds);
    let mut api = ApiCpu::new(upstream, 2);
    let (a, b) =
        runner::pair_observed(a, b, workers, (ctx.budget, ctx.rounds), &bar, &mut api).await;
    bar.finish_and_clear();
    let (a, b) = (a[0].summary(names[0]), b[0].summary(names[1]));
    let notes = api.note(&[&a, &b]).into_iter().collect();
    (a, b, notes)
}

/// Runs `a`, `b` and `c` in rounds, each round of three starting one side further (a b c,
/// b c a, c a b, ...) so that drift hits all three alike; as [`pair`] otherwise.
pub(super) async fn trio<A: Op, B: Op, C: Op>(
    ctx: &Ctx,
    workload: &str,
    upstream: &Upstream,
    (a, b, c): (&Arc<A>, &Arc<B>, &Arc<C>),
    workers: &mut Vec<Worker>,
    names: [&str; 3],
) -> ([SideSummary; 3], Vec<String>) {
    let bar = ctx.bar(workload, ctx.rounds);
    let mut api = ApiCpu::new(upstream, 3);
    let share = ctx.budget.per_round(ctx.rounds);
    let mut sides = [a.classes(), b.classes(), c.classes()].map(|n| vec![Samples::default(); n]);
    for r in 0..ctx.rounds.max(1) as usize {
        for side in (r..r + 3).map(|s| s % 3) {
            api.before(side).await;
            let round = match side {
                0 => runner::round(a, workers, share).await,
                1 => runner::round(b, workers, share).await,
                _ => runner::round(c, workers, share).await,
            };
            runner::accumulate(&mut sides[side], &round);
            api.after(side).await;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let [a, b, c] = [0, 1, 2].map(|side| sides[side][0].summary(names[side]));
    let notes = api.note(&[&a, &b, &c]).into_iter().collect();
    ([a, b, c], notes)
}
