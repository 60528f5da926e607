//! The checker: reads a history in order and finds the first broken promise.

use std::collections::HashMap;

use serde_json::Value;

use crate::Property;
use crate::client::{actor_name, key_name};
use crate::history::{Answer, Applied, Entry, Event, History, OpKind};
use crate::reference::{Applies, Broken, Reference};

/// What a client sent.
struct Sent {
    actor: u8,
    key: u8,
    body: String,
    at: u64,
    healing: bool,
}

impl Sent {
    fn scope(&self) -> String {
        format!("{}/{}", actor_name(self.actor), key_name(self.key))
    }
}

/// A 2xx a client received: when, and which effect it reported.
#[derive(Clone, Copy)]
struct Ack {
    at: u64,
    effect: u64,
}

#[derive(Default)]
struct Checker {
    reference: Reference,
    sent: HashMap<u64, Sent>,
    /// Every response stored, by scope, with when.
    stored: HashMap<String, Vec<(u64, Answer)>>,
    /// The record of each effect, and the effect of each record.
    effect_record: HashMap<u64, u32>,
    record_effect: HashMap<u32, u64>,
    /// The last 2xx of each (scope, body).
    acks: HashMap<(String, String), Ack>,
}

/// The first broken promise of `history`, with when it was broken.
pub(crate) fn check(history: &History) -> Result<(), (Property, u64, String)> {
    let mut checker = Checker::default();
    for entry in &history.entries {
        checker
            .entry(entry)
            .map_err(|(property, what)| (property, entry.at_ms, what))?;
    }
    Ok(())
}

impl Checker {
    fn entry(&mut self, entry: &Entry) -> Result<(), Broken> {
        let at = entry.at_ms;
        match &entry.event {
            Event::Request {
                attempt,
                actor,
                key,
                body,
                healing,
                ..
            } => {
                let sent = Sent {
                    actor: *actor,
                    key: *key,
                    body: body.clone(),
                    at,
                    healing: *healing,
                };
                self.sent.insert(*attempt, sent);
                Ok(())
            }
            Event::Store {
                op,
                scope,
                claim,
                applied,
                ..
            } => {
                self.store(at, *op, scope.as_deref(), applied);
                let call = Applies {
                    at,
                    op: *op,
                    scope: scope.as_deref(),
                    claim: *claim,
                    applied,
                };
                self.reference.apply(&call)
            }
            Event::Effect { exec, effect, .. } => self.effect(exec.record, *effect),
            Event::Response {
                attempt,
                answer,
                replayed,
            } => self.response(at, *attempt, answer, *replayed),
            Event::Timeout { attempt } => match self.sent.get(attempt) {
                Some(sent) if sent.healing => Err((
                    Property::StuckClaim,
                    format!(
                        "{}: no answer after healing (attempt {attempt})",
                        sent.scope()
                    ),
                )),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Keeps every response stored, for the replay check.
    fn store(&mut self, at: u64, op: OpKind, scope: Option<&str>, applied: &Applied) {
        if let (
            OpKind::Complete,
            Some(scope),
            Applied::Settled {
                stored: Some(answer),
            },
        ) = (op, scope, applied)
        {
            self.stored
                .entry(scope.to_owned())
                .or_default()
                .push((at, answer.clone()));
        }
    }

    /// One record, one effect: the derived key must be the same for every execution of it.
    fn effect(&mut self, record: u32, effect: u64) -> Result<(), Broken> {
        self.effect_record.insert(effect, record);
        match self.record_effect.insert(record, effect) {
            Some(before) if before != effect => Err((
                Property::DoubleExecution,
                format!("record {record} made effects {before} and {effect}"),
            )),
            _ => Ok(()),
        }
    }

    fn response(
        &mut self,
        at: u64,
        attempt: u64,
        answer: &Answer,
        replayed: bool,
    ) -> Result<(), Broken> {
        let Some(sent) = self.sent.get(&attempt) else {
            return Ok(());
        };
        let scope = sent.scope();
        if sent.healing && answer.status == 409 {
            return Err((
                Property::StuckClaim,
                format!("{scope}: 409 after healing (attempt {attempt})"),
            ));
        }
        if replayed {
            self.replayed(&scope, at, attempt, answer)?;
        }
        if !(200..300).contains(&answer.status) {
            return Ok(());
        }
        let effect = whose(sent, answer).map_err(|what| {
            (
                Property::CrossDelivery,
                format!("{scope}: attempt {attempt} with {} got {what}", sent.body),
            )
        })?;
        let (body, sent_at) = (sent.body.clone(), sent.at);
        self.acked((scope, body), sent_at, at, effect)
    }

    /// A replay must be a response stored for the scope before it was delivered.
    fn replayed(&self, scope: &str, at: u64, attempt: u64, answer: &Answer) -> Result<(), Broken> {
        let stored = self.stored.get(scope).into_iter().flatten();
        if stored
            .clone()
            .any(|(when, kept)| *when <= at && kept == answer)
        {
            return Ok(());
        }
        let what = format!(
            "{scope}: attempt {attempt} replayed {answer:?}, never stored ({:?})",
            stored.collect::<Vec<_>>()
        );
        Err((Property::ReplayMismatch, what))
    }

    /// A request sent after a 2xx must get the same effect while that effect's record lives.
    fn acked(
        &mut self,
        id: (String, String),
        sent_at: u64,
        at: u64,
        effect: u64,
    ) -> Result<(), Broken> {
        if let Some(before) = self.acks.get(&id).copied()
            && before.effect != effect
            && before.at < sent_at
        {
            let record = self.effect_record.get(&before.effect).copied();
            if record.is_some() && record == self.reference.live(&id.0, at) {
                let what = format!(
                    "{}: acknowledged effect {} (record {record:?}, still live) answered later as effect {effect}",
                    id.0, before.effect
                );
                return Err((Property::AckLost, what));
            }
        }
        self.acks.insert(id, Ack { at, effect });
        Ok(())
    }
}

/// The effect a 2xx reports, if it answers this very request; else what it answers.
fn whose(sent: &Sent, answer: &Answer) -> Result<u64, String> {
    let value: Value = serde_json::from_str(&answer.body)
        .map_err(|_| format!("an unreadable body {:?}", answer.body))?;
    let field = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mine = field("actor") == actor_name(sent.actor)
        && field("key") == key_name(sent.key)
        && field("request") == sent.body;
    match value.get("effect").and_then(Value::as_u64) {
        Some(effect) if mine => Ok(effect),
        _ => Err(format!("the response to {}", answer.body)),
    }
}
