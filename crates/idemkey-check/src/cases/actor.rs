//! `cross-actor`: the same key under another actor is another request.

use super::{Finding, Outcome, ensure, expect_success, failed};
use crate::{
    context::{Actor, Ctx},
    resources::describe_added,
};

pub(crate) async fn cross_actor(ctx: &Ctx) -> Outcome {
    if ctx.config.actor2_headers.is_none() {
        return Ok(Finding::skipped("no --actor2-header given"));
    }
    let before = ctx.list().await?;
    let key = ctx.fresh_key();
    let first = ctx
        .create(Actor::First, Some(&key), &ctx.config.body)
        .await?;
    expect_success(&first, "actor 1's request")?;
    let second = ctx
        .create(Actor::Second, Some(&key), &ctx.config.body)
        .await?;
    ensure(!second.same_body(&first), || {
        format!("actor 2 received actor 1's response: {}", second.summary())
    })?;
    expect_success(&second, "actor 2's request with the same key")?;
    let (id1, id2) = (first.resource(), second.resource());
    ensure(id1.is_none() || id1 != id2, || {
        format!("both actors got resource {id1:?}")
    })?;
    let added = ctx.added_since(before.as_ref()).await?;
    if let (Some(added), Some(id2)) = (&added, &id2) {
        ensure(!added.contains(id2), || {
            format!("actor 2's resource {id2} is in actor 1's list")
        })?;
    }
    let counted = describe_added(added.as_deref(), 1).map_err(failed)?;
    let show = |id: Option<String>| id.unwrap_or_else(|| "?".to_owned());
    Ok(Finding::pass(format!(
        "actor 1 got {}, actor 2 got {}; {counted}",
        show(id1),
        show(id2)
    )))
}
