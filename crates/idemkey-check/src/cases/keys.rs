//! `missing-key` and `invalid-keys`: key syntax.

use super::{Finding, Outcome, failed};
use crate::context::{Actor, Ctx};

/// Longest valid key, per the IETF draft and Stripe.
const MAX_KEY: usize = 255;

pub(crate) async fn missing_key(ctx: &Ctx) -> Outcome {
    let response = ctx.create(Actor::First, None, &ctx.config.body).await?;
    match response.status {
        400 => Ok(Finding::pass("a request without a key answered 400")),
        _ if response.is_success() => Ok(Finding::skipped(format!(
            "API does not require keys (a request without one answered {})",
            response.status
        ))),
        _ => Err(failed(format!(
            "a request without a key answered {}, expected 400",
            response.summary()
        ))),
    }
}

/// The malformed keys sent, each with a label for the evidence. Each is unique to this run.
fn malformed_keys(fresh: &str) -> Vec<(&'static str, Vec<u8>)> {
    let mut long = fresh.as_bytes().to_vec();
    long.resize(MAX_KEY + 1, b'k');
    let with = |byte: u8| {
        let mut key = fresh.as_bytes().to_vec();
        key.insert(4, byte);
        key
    };
    vec![
        ("empty", Vec::new()),
        ("256 chars", long),
        ("tab", with(b'\t')),
        ("0x01", with(0x01)),
        ("DEL", with(0x7f)),
    ]
}

pub(crate) async fn invalid_keys(ctx: &Ctx) -> Outcome {
    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    let mut other_4xx = Vec::new();
    for (label, key) in malformed_keys(&ctx.fresh_key()) {
        let request = ctx.raw_post(Some(&key), &ctx.config.body);
        let response = ctx.raw_exchange(&request).await?;
        seen.push(format!("{label}→{}", response.status));
        match response.status {
            400 => {}
            401..=499 => other_4xx.push(label),
            _ => wrong.push(label),
        }
    }
    let seen = seen.join(", ");
    if !wrong.is_empty() {
        return Err(failed(format!(
            "accepted or errored on {}: {seen}",
            wrong.join(", ")
        )));
    }
    let finding = Finding::pass(seen);
    Ok(if other_4xx.is_empty() {
        finding
    } else {
        finding.note(format!(
            "rejected {} with a 4xx other than 400",
            other_4xx.join(", ")
        ))
    })
}
