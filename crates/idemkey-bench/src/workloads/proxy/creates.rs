//! `proxy-create` and `proxy-direct`: creates through the proxy, keyed or forwarded, and
//! straight to the API behind it.

use std::sync::Arc;

use crate::ctx::Ctx;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{OnAlt, Worker};
use crate::targets;
use crate::workloads::http::Create;

use super::pair::{pair, ratio_name, report, trio};
use super::upstream::Upstream;

/// A fresh key through the proxy against no key through the proxy and no key straight to
/// the API, in the same rounds: what recording costs against a forward, and against the API
/// alone, which is what a client sees if it puts the proxy in front of its API.
pub(super) async fn create(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> (WorkloadReport, Vec<Ratio>) {
    let create = |keyed, tag: &str| Create {
        keyed,
        prefix: format!("{}-{tag}", ctx.prefix),
    };
    let keyed = Arc::new(create(true, "pk"));
    let forwarded = Arc::new(create(false, "pn"));
    let direct = Arc::new(OnAlt(create(false, "pd")));
    let names = [
        "create with a fresh key, through the proxy",
        "create without a key, forwarded by the proxy",
        "create without a key, straight to the API",
    ];
    let ops = (&keyed, &forwarded, &direct);
    let (sides, notes) = trio(ctx, "proxy-create", upstream, ops, workers, names).await;
    let [keyed, forwarded, direct] = &sides;
    let ratios = vec![
        targets::ratio(
            ctx.proxy_create_bar(),
            &ratio_name(
                "proxy: keyed create / key-less create forwarded (throughput)",
                upstream,
            ),
            keyed.throughput,
            forwarded.throughput,
        ),
        Ratio::info(
            &ratio_name(
                "proxy: keyed create / key-less create straight to the API (throughput)",
                upstream,
            ),
            keyed.throughput,
            direct.throughput,
        ),
    ];
    (
        report("proxy-create", upstream, sides.into(), notes),
        ratios,
    )
}

/// No key through the proxy against no key straight to the API.
pub(super) async fn direct(
    ctx: &Ctx,
    upstream: &Upstream,
    workers: &mut Vec<Worker>,
) -> (WorkloadReport, Vec<Ratio>) {
    let proxied = Arc::new(Create {
        keyed: false,
        prefix: format!("{}-pp", ctx.prefix),
    });
    let direct = Arc::new(OnAlt(Create {
        keyed: false,
        prefix: format!("{}-pd", ctx.prefix),
    }));
    let names = [
        "create without a key, forwarded by the proxy",
        "create without a key, straight to the API",
    ];
    let ops = (&proxied, &direct);
    let (a, b, notes) = pair(ctx, "proxy-direct", upstream, ops, workers, names).await;
    let ratio = Ratio::info(
        &ratio_name(
            "proxy: key-less create through the proxy / straight to the API (throughput)",
            upstream,
        ),
        a.throughput,
        b.throughput,
    );
    let report = report("proxy-direct", upstream, vec![a, b], notes);
    (report, vec![ratio])
}
