//! `replay`, `replay-fidelity` and `json-equivalence`: what an identical retry gets back.

use serde_json::Value;

use super::{Finding, Outcome, ensure, expect_success, id_suffix};
use crate::{
    context::{Actor, Ctx},
    exchange::Exchange,
};

/// Creates with a fresh key, then retries the same body with the same key.
async fn create_twice(ctx: &Ctx, retry_body: &str) -> Result<(Exchange, Exchange), super::Stop> {
    let key = ctx.fresh_key();
    let first = ctx
        .create(Actor::First, Some(&key), &ctx.config.body)
        .await?;
    expect_success(&first, "the first request")?;
    let retry = ctx.create(Actor::First, Some(&key), retry_body).await?;
    Ok((first, retry))
}

pub(crate) async fn replay(ctx: &Ctx) -> Outcome {
    let (first, retry) = create_twice(ctx, &ctx.config.body).await?;
    ensure(retry.status == first.status, || {
        format!(
            "first answered {}, the retry {}",
            first.status,
            retry.summary()
        )
    })?;
    ensure(retry.same_body(&first), || {
        format!(
            "the retry's body differs: {} then {}",
            first.summary(),
            retry.summary()
        )
    })?;
    let note = if retry.marked_replayed() {
        "the retry is marked Idempotent-Replayed: true"
    } else {
        "the retry is not marked Idempotent-Replayed (informational)"
    };
    Ok(Finding::pass(format!(
        "both {}, same body{}",
        first.status,
        id_suffix(&first)
    ))
    .note(note))
}

pub(crate) async fn fidelity(ctx: &Ctx) -> Outcome {
    let (first, retry) = create_twice(ctx, &ctx.config.body).await?;
    let mut differences = Vec::new();
    if first.status != retry.status {
        differences.push(format!("status {} then {}", first.status, retry.status));
    }
    for name in ["location", "content-type"] {
        if first.header(name) != retry.header(name) {
            let (was, now) = (show(first.header(name)), show(retry.header(name)));
            differences.push(format!("{name} {was} then {now}"));
        }
    }
    if first.body != retry.body {
        differences.push(format!(
            "body bytes differ ({} then {} bytes)",
            first.body.len(),
            retry.body.len()
        ));
    }
    ensure(differences.is_empty(), || differences.join("; "))?;
    let (location, content_type) = (
        show(first.header("location")),
        show(first.header("content-type")),
    );
    Ok(Finding::pass(format!(
        "kept status {}, Location {location}, Content-Type {content_type}, {} body bytes",
        first.status,
        first.body.len()
    )))
}

pub(crate) async fn json_equivalence(ctx: &Ctx) -> Outcome {
    let reformatted = reformat(&ctx.config.body);
    let (first, retry) = create_twice(ctx, &reformatted).await?;
    ensure(retry.is_success(), || {
        format!(
            "the reordered, re-spaced body was not replayed: {}",
            retry.summary()
        )
    })?;
    ensure(retry.same_body(&first), || {
        format!(
            "the reordered body got another response: {} then {}",
            first.summary(),
            retry.summary()
        )
    })?;
    Ok(Finding::pass(format!(
        "reordered, re-spaced body replayed{}",
        id_suffix(&first)
    )))
}

/// A header value for evidence: the value, or `absent`.
fn show(value: Option<&str>) -> String {
    value.map_or_else(|| "absent".to_owned(), str::to_owned)
}

/// `body` with object members in reverse key order and extra whitespace (unchanged if not JSON).
fn reformat(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => {
            let mut out = String::from("\n  ");
            write_reordered(&value, &mut out);
            out.push('\n');
            out
        }
        Err(_) => body.to_owned(),
    }
}

fn write_reordered(value: &Value, out: &mut String) {
    match value {
        Value::Object(members) => {
            out.push_str("{ ");
            for (i, (name, member)) in members.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" ,\n    ");
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push_str(" :  ");
                write_reordered(member, out);
            }
            out.push_str(" }");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                write_reordered(item, out);
            }
            out.push_str(" ]");
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::reformat;

    #[test]
    fn reformat_reorders_and_respaces_without_changing_the_value() {
        let body = r#"{"a":1,"b":{"c":[1,"x"],"d":null}}"#;
        let out = reformat(body);
        assert_ne!(out, body);
        assert!(out.find("\"b\"").unwrap() < out.find("\"a\"").unwrap());
        let before: serde_json::Value = serde_json::from_str(body).unwrap();
        let after: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(before, after);
    }
}
