//! What the client half costs a client: keyed creates through `reqwest_middleware` with
//! idemkey-reqwest's `IdempotencyMiddleware` declaring the service (it makes the key), against the
//! same creates through the same `reqwest::Client` with no middleware and the key set by
//! hand. Same server, bodies, credentials and connection pool; only the middleware differs.
//!
//! The server's work dominates both sides, so the throughputs are close and drift between
//! rounds is as large as the difference: after a warm-up round of each, the sides alternate
//! in pairs (a b, b a, ...) and the ratio held to its target is the median of the pairs'
//! ratios. The middleware's cost is the client's CPU, reported per request from this
//! process's CPU time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::StatusCode;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use idemkey_reqwest::{Delivery, IDEMPOTENCY_KEY, IdempotencyMiddleware, Policy};
use reqwest::{Response, Url};
use reqwest_middleware::ClientWithMiddleware;

use crate::ctx::Ctx;
use crate::harness::client::{Target, note_body};
use crate::harness::cpu;
use crate::harness::limits::Limits;
use crate::harness::report::{Ratio, WorkloadReport};
use crate::harness::runner::{self, Budget, Op, Worker};
use crate::harness::stats::{Samples, median};
use crate::targets::{self, Id};

/// How a create is sent.
enum Via {
    /// The client alone; the caller sets the key.
    Plain(reqwest::Client),
    /// The same client under the middleware, which sets the key.
    Middleware(ClientWithMiddleware),
}

/// `POST /v1/notes` with a fresh key each time, read to the end of its body.
struct Create {
    via: Via,
    url: Url,
    bearer: HeaderValue,
    /// Makes titles unique to this run and this side.
    prefix: String,
    /// Attempts beyond the first that the middleware made (none expected).
    retries: AtomicU64,
}

impl Op for Create {
    async fn call(&self, worker: &mut Worker) -> Result<usize, u16> {
        let seq = worker.next_seq();
        let body = note_body(&format!("{}-{}-{seq}", self.prefix, worker.id));
        let json = HeaderValue::from_static("application/json");
        let response = match &self.via {
            Via::Plain(client) => client
                .post(self.url.clone())
                .header(IDEMPOTENCY_KEY, fresh_key())
                .header(AUTHORIZATION, self.bearer.clone())
                .header(CONTENT_TYPE, json)
                .body(body)
                .send()
                .await
                .map_err(|_| 0_u16)?,
            Via::Middleware(client) => client
                .post(self.url.clone())
                .header(AUTHORIZATION, self.bearer.clone())
                .header(CONTENT_TYPE, json)
                .body(body)
                .send()
                .await
                .map_err(|_| 0_u16)?,
        };
        if let Some(delivery) = response.extensions().get::<Delivery>() {
            let retries = u64::from(delivery.attempts.saturating_sub(1));
            self.retries.fetch_add(retries, Ordering::Relaxed);
        }
        read(response).await
    }
}

/// A fresh key in the draft's quoted form, as a caller without the middleware would make it.
fn fresh_key() -> HeaderValue {
    let quoted = format!("\"{}\"", uuid::Uuid::new_v4());
    // A quoted UUID is visible ASCII: always a valid header value.
    HeaderValue::try_from(quoted).unwrap_or_else(|_| unreachable!("a quoted UUID"))
}

/// Reads the body to its end, within [`Limits::REQUEST`]'s size (the client has its time):
/// `Ok(0)` for 201, else the status (0: no complete answer).
async fn read(mut response: Response) -> Result<usize, u16> {
    let status = response.status();
    let mut read = 0;
    while let Some(chunk) = response.chunk().await.map_err(|_| 0_u16)? {
        read += chunk.len();
        if read > Limits::REQUEST.body {
            return Err(0);
        }
    }
    if status == StatusCode::CREATED {
        Ok(0)
    } else {
        Err(status.as_u16())
    }
}

/// One side's samples and this process's CPU time, over its rounds.
#[derive(Default)]
struct Side {
    samples: Samples,
    /// The client's CPU time: this process, every thread (`None` without `/proc`).
    client_cpu: Option<Duration>,
}

impl Side {
    /// Runs one round of `op`, adds it to this side, and returns its throughput.
    async fn round(&mut self, op: &Arc<Create>, workers: &mut Vec<Worker>, share: Budget) -> f64 {
        let before = cpu::this_process();
        let round = runner::round(op, workers, share).await;
        let spent = cpu::this_process()
            .zip(before)
            .map(|(now, then)| now.saturating_sub(then));
        self.client_cpu = self.client_cpu.zip(spent).map(|(a, b)| a + b).or(spent);
        runner::accumulate(std::slice::from_mut(&mut self.samples), &round);
        round[0].summary("").throughput
    }

    /// The client's CPU time per request, in microseconds.
    fn client_cpu_us(&self) -> Option<f64> {
        let requests = self.samples.count() + self.samples.error_count();
        let spent = self.client_cpu?.as_secs_f64() * 1e6;
        (requests > 0).then(|| spent / requests as f64)
    }
}

/// Keyed creates through the middleware against plain reqwest, on the service at `target`.
pub(crate) async fn middleware(
    ctx: &Ctx,
    target: &Target,
    workers: &mut Vec<Worker>,
) -> anyhow::Result<(WorkloadReport, Vec<Ratio>)> {
    let (plain, keyed) = ops(ctx, target)?;
    let share = ctx.budget.per_round(ctx.rounds);
    let (mut a, mut b) = (Side::default(), Side::default());
    // Warm-up: connections opened, caches and allocators warm; not counted.
    runner::round(&plain, workers, share).await;
    runner::round(&keyed, workers, share).await;
    let bar = ctx.bar("middle", ctx.rounds);
    let mut pairs = Vec::new();
    for r in 0..ctx.rounds.max(1) {
        let (plain_rate, keyed_rate) = if r % 2 == 0 {
            let plain_rate = a.round(&plain, workers, share).await;
            (plain_rate, b.round(&keyed, workers, share).await)
        } else {
            let keyed_rate = b.round(&keyed, workers, share).await;
            (a.round(&plain, workers, share).await, keyed_rate)
        };
        pairs.push(if plain_rate > 0.0 {
            keyed_rate / plain_rate
        } else {
            0.0
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(report(
        &a,
        &b,
        &pairs,
        keyed.retries.load(Ordering::Relaxed),
    ))
}

/// The two sides' operations: one `reqwest::Client`, alone and under the middleware.
fn ops(ctx: &Ctx, target: &Target) -> anyhow::Result<(Arc<Create>, Arc<Create>)> {
    // As the layer workload: an application that traces at info, so the middleware pays for
    // what it logs at that level (its per-attempt spans are at debug).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .try_init();
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .timeout(Limits::REQUEST.time)
        .build()?;
    let url: Url = format!("http://{}/v1/notes", target.addr).parse()?;
    let keyed = reqwest_middleware::ClientBuilder::new(client.clone())
        .with(IdempotencyMiddleware::new(Policy::for_base(url.clone())))
        .build();
    let create = |via, side: &str| {
        Arc::new(Create {
            via,
            url: url.clone(),
            bearer: target.bearer.clone(),
            prefix: format!("{}-{side}", ctx.prefix),
            retries: AtomicU64::new(0),
        })
    };
    Ok((
        create(Via::Plain(client), "p"),
        create(Via::Middleware(keyed), "w"),
    ))
}

fn report(a: &Side, b: &Side, pairs: &[f64], retries: u64) -> (WorkloadReport, Vec<Ratio>) {
    let (a_sum, b_sum) = (
        a.samples
            .summary("keyed create, plain reqwest (key set by the caller)"),
        b.samples
            .summary("keyed create, reqwest with IdempotencyMiddleware"),
    );
    let name = "middleware / plain reqwest, keyed create";
    let ratios = vec![
        targets::ratio(
            Id::Middleware,
            &format!("{name} (throughput, median of {} pairs)", pairs.len()),
            median(pairs),
            1.0,
        ),
        Ratio::info(
            &format!("{name} (throughput, all rounds)"),
            b_sum.throughput,
            a_sum.throughput,
        ),
        Ratio::info(&format!("{name} (p99)"), b_sum.p99_us, a_sum.p99_us),
    ];
    let each: Vec<String> = pairs.iter().map(|r| format!("{r:.3}")).collect();
    let cpu = |side: &Side| {
        side.client_cpu_us()
            .map_or("-".to_owned(), |us| format!("{us:.1}"))
    };
    let mut workload = WorkloadReport::new("middleware", vec![a_sum, b_sum]);
    workload.notes = vec![
        format!("throughput ratio of each pair: {}", each.join(", ")),
        format!(
            "client CPU µs/req (this process): plain {}, middleware {}",
            cpu(a),
            cpu(b)
        ),
        format!("retries made by the middleware: {retries}"),
    ];
    (workload, ratios)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_is_a_quoted_uuid_and_a_valid_key() {
        let key = fresh_key();
        let text = key.to_str().unwrap();
        assert!(text.starts_with('"') && text.ends_with('"') && text.len() == 38);
        assert!(idemkey_core::Key::parse(key.as_bytes()).is_ok());
        assert_ne!(fresh_key(), key);
    }
}
