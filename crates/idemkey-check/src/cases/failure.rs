//! `failure-not-stored`: a request the API rejects must leave its key unused.

use super::{Finding, Outcome, failed, id_suffix};
use crate::context::{Actor, Ctx};

pub(crate) async fn failure_not_stored(ctx: &Ctx) -> Outcome {
    let Some(invalid) = &ctx.config.invalid_body else {
        return Ok(Finding::skipped("no --invalid-body given"));
    };
    let key = ctx.fresh_key();
    let rejected = ctx.create(Actor::First, Some(&key), invalid).await?;
    if rejected.is_success() {
        let reason = format!("the API accepted --invalid-body ({})", rejected.status);
        return Ok(Finding::skipped(reason));
    }
    let valid = ctx
        .create(Actor::First, Some(&key), &ctx.config.body)
        .await?;
    if valid.is_success() {
        return Ok(Finding::pass(format!(
            "invalid body answered {}; the same key then created{}",
            rejected.status,
            id_suffix(&valid)
        )));
    }
    let evidence = if valid.status == rejected.status && valid.same_body(&rejected) {
        format!(
            "the rejection was stored and replayed to a valid request: {}",
            valid.summary()
        )
    } else {
        format!(
            "after a {} rejection the valid request under the same key answered {}",
            rejected.status,
            valid.summary()
        )
    };
    Err(failed(evidence))
}
