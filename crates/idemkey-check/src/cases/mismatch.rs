//! `mismatch`: the same key with a different body must be rejected, creating nothing.

use super::{Finding, Outcome, expect_success, failed};
use crate::{
    context::{Actor, Ctx},
    resources::describe_added,
};

pub(crate) async fn mismatch(ctx: &Ctx) -> Outcome {
    let before = ctx.list().await?;
    let key = ctx.fresh_key();
    let first = ctx
        .create(Actor::First, Some(&key), &ctx.config.body)
        .await?;
    expect_success(&first, "the first request")?;
    let other = ctx
        .create(Actor::First, Some(&key), &ctx.config.alt_body)
        .await?;
    if other.is_success() {
        let what = if other.resource() == first.resource() {
            "was answered with the first request's response"
        } else {
            "created another resource"
        };
        return Err(failed(format!(
            "a different body under the same key {what}: {}",
            other.summary()
        )));
    }
    if !(400..500).contains(&other.status) {
        return Err(failed(format!(
            "a different body answered {}, expected 422",
            other.summary()
        )));
    }
    let added = ctx.added_since(before.as_ref()).await?;
    let counted = describe_added(added.as_deref(), 1).map_err(failed)?;
    let finding = Finding::pass(format!(
        "different body rejected with {}; {counted}",
        other.status
    ));
    Ok(if other.status == 422 {
        finding
    } else {
        finding.note(format!(
            "rejected with {}, where the IETF draft says 422",
            other.status
        ))
    })
}
