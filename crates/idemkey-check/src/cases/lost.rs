//! `lost-response`: the client sends a request, never reads the answer, then retries.
//!
//! Two clients are simulated, each with its own key: one hangs up right after sending (the
//! server may or may not execute the request), one hangs up once the response starts to arrive
//! (the request was executed, its response is lost). Each retry must converge on one resource.

use std::time::Duration;

use super::{Finding, Outcome, Stop, ensure, expect_success, failed};
use crate::{
    context::{Ctx, RequestError},
    raw::{self, HangUp},
    resources::{Ids, describe_added},
};

/// How long to wait, at most, for an abandoned request to show up in the list before retrying.
const SETTLE: Duration = Duration::from_millis(500);
/// Interval between list polls while waiting.
const POLL: Duration = Duration::from_millis(50);

pub(crate) async fn lost_response(ctx: &Ctx) -> Outcome {
    let before = ctx.list().await?;
    let at_once = abandon_and_retry(ctx, HangUp::AtOnce, before.as_ref()).await?;
    let unread = abandon_and_retry(ctx, HangUp::Unread, before.as_ref()).await?;
    let added = ctx.added_since(before.as_ref()).await?;
    let counted = describe_added(added.as_deref(), 2).map_err(failed)?;
    Ok(Finding::pass(format!(
        "hung up at once, retries converged on {at_once}; left unread, on {unread}; {counted}"
    )))
}

/// Sends the body under a fresh key, hangs up, retries twice; returns the resource the retries
/// agree on.
async fn abandon_and_retry(
    ctx: &Ctx,
    hang_up: HangUp,
    before: Option<&Ids>,
) -> Result<String, Stop> {
    let key = ctx.fresh_key();
    let request = ctx.raw_post(Some(key.as_bytes()), &ctx.config.body);
    raw::send_and_abandon(&ctx.target.addr, &request, hang_up, ctx.config.timeout)
        .await
        .map_err(RequestError::from)?;
    if hang_up == HangUp::AtOnce {
        wait_for_growth(ctx, before).await?;
    }
    let retry = ctx.create_settled(&key, &ctx.config.body).await?;
    expect_success(&retry, "the retry")?;
    let again = ctx.create_settled(&key, &ctx.config.body).await?;
    expect_success(&again, "the second retry")?;
    let (id, again_id) = (show(retry.resource()), show(again.resource()));
    ensure(id == again_id, || {
        format!("the retries name different resources: {id} then {again_id}")
    })?;
    Ok(id)
}

/// Gives the server a moment to execute the abandoned request before the retry, so that the
/// retry tends to meet a stored record rather than race it. With `--list`, polls until a new
/// resource appears (bounded: the server may have dropped the request); without it, returns.
async fn wait_for_growth(ctx: &Ctx, before: Option<&Ids>) -> Result<(), Stop> {
    let Some(before) = before else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + SETTLE;
    while tokio::time::Instant::now() < deadline {
        if let Some(now) = ctx.list().await?
            && now.difference(before).next().is_some()
        {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

fn show(id: Option<String>) -> String {
    id.map_or_else(|| "no id".to_owned(), |id| format!("id {id}"))
}
