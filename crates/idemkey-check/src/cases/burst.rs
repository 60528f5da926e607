//! `concurrent-burst`: N identical requests held back by their last byte, then released together.

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    sync::Arc,
};

use tokio::{io::AsyncWriteExt, sync::Barrier, task::JoinSet, time::timeout};

use super::{Finding, Outcome, Stop, ensure, expect_success, failed};
use crate::{
    context::{Ctx, RequestError},
    exchange::Exchange,
    raw::{self, read_response, timed_out},
    resources::describe_added,
};

pub(crate) async fn concurrent_burst(ctx: &Ctx) -> Outcome {
    let before = ctx.list().await?;
    let key = ctx.fresh_key();
    let request = ctx.raw_post(Some(key.as_bytes()), &ctx.config.body);
    let answers = release_together(ctx, &request).await?;
    let (winner, tally) = judge(&answers)?;

    let follow = ctx.create_settled(&key, &ctx.config.body).await?;
    expect_success(&follow, "a retry after the burst")?;
    ensure(follow.same_body(winner), || {
        format!(
            "a retry after the burst got another response: {}",
            follow.summary()
        )
    })?;
    let added = ctx.added_since(before.as_ref()).await?;
    let counted = describe_added(added.as_deref(), 1).map_err(failed)?;
    let id = winner.resource().unwrap_or_else(|| "?".to_owned());
    Ok(Finding::pass(format!(
        "{} requests: {tally}; one resource {id}; {counted}",
        answers.len()
    )))
}

/// Opens one connection per request, writes all but the last byte on each, then writes the last
/// bytes together behind a barrier and reads every answer.
async fn release_together(ctx: &Ctx, request: &[u8]) -> Result<Vec<io::Result<Exchange>>, Stop> {
    let (limit, n) = (ctx.config.timeout, ctx.config.concurrency);
    let split = request.len().saturating_sub(1);
    let (head, last) = (&request[..split], request[split..].to_vec());
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = raw::connect(&ctx.target.addr, limit)
            .await
            .map_err(RequestError::from)?;
        let written = timeout(limit, stream.write_all(head))
            .await
            .map_err(timed_out);
        written.and_then(|w| w).map_err(RequestError::from)?;
        streams.push(stream);
    }
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = JoinSet::new();
    for mut stream in streams {
        let (barrier, last) = (Arc::clone(&barrier), last.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let answer = async {
                // A server may answer early (say 401) and close: still read what it sent.
                let written = stream.write_all(&last).await;
                let response = read_response(&mut stream).await;
                response.or_else(|error| written.and(Err(error)))
            };
            timeout(limit, answer).await.map_err(timed_out)?
        });
    }
    let mut answers = Vec::with_capacity(n);
    while let Some(joined) = tasks.join_next().await {
        answers.push(joined.map_err(io::Error::other).and_then(|answer| answer));
    }
    Ok(answers)
}

/// Accepts the burst's answers when every one is a 2xx with one and the same body or a 409, and
/// at least one is a 2xx. Returns a 2xx answer and a tally such as `201×1, 409×31`.
fn judge(answers: &[io::Result<Exchange>]) -> Result<(&Exchange, String), Stop> {
    let missing: Vec<&io::Error> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    if let Some(error) = missing.first() {
        return Err(failed(format!(
            "{} of {} requests got no answer: {error}",
            missing.len(),
            answers.len()
        )));
    }
    let got: Vec<&Exchange> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    let tally = tally(&got);
    let unexpected = got.iter().any(|a| !a.is_success() && a.status != 409);
    ensure(!unexpected, || {
        format!("answers other than 2xx or 409: {tally}")
    })?;
    let successes: Vec<&Exchange> = got.into_iter().filter(|a| a.is_success()).collect();
    let Some(winner) = successes.first().copied() else {
        return Err(failed(format!("no request succeeded: {tally}")));
    };
    let ids: BTreeSet<String> = successes.iter().filter_map(|a| a.resource()).collect();
    ensure(ids.len() <= 1, || {
        let shown: Vec<String> = ids.iter().take(5).cloned().collect();
        format!(
            "{} resources created ({}): {tally}",
            ids.len(),
            shown.join(", ")
        )
    })?;
    ensure(successes.iter().all(|a| a.same_body(winner)), || {
        format!("the 2xx answers have different bodies: {tally}")
    })?;
    Ok((winner, tally))
}

/// `201×1 (replayed×0), 409×31`: answers counted by status.
fn tally(answers: &[&Exchange]) -> String {
    let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
    for answer in answers {
        *counts.entry(answer.status).or_default() += 1;
    }
    let replayed = answers.iter().filter(|a| a.marked_replayed()).count();
    let parts: Vec<String> = counts
        .iter()
        .map(|(status, n)| format!("{status}×{n}"))
        .collect();
    format!("{} (marked replayed: {replayed})", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;

    fn answer(status: u16, body: &str) -> io::Result<Exchange> {
        Ok(Exchange {
            status,
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn one_resource_and_conflicts_pass() {
        let answers = [
            answer(201, r#"{"id":"a"}"#),
            answer(409, "busy"),
            answer(201, r#"{"id":"a"}"#),
        ];
        let (winner, tally) = judge(&answers).unwrap();
        assert_eq!(winner.resource().as_deref(), Some("a"));
        assert_eq!(tally, "201×2, 409×1 (marked replayed: 0)");
    }

    #[test]
    fn several_resources_or_no_success_fail() {
        let two = [answer(201, r#"{"id":"a"}"#), answer(201, r#"{"id":"b"}"#)];
        assert!(
            matches!(judge(&two), Err(Stop::Verdict(f)) if f.evidence.starts_with("2 resources"))
        );
        assert!(judge(&[answer(409, ""), answer(409, "")]).is_err());
        assert!(judge(&[answer(201, r#"{"id":"a"}"#), answer(500, "")]).is_err());
        assert!(judge(&[answer(201, "{}"), Err(io::Error::other("reset"))]).is_err());
    }
}
