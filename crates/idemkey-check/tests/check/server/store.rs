//! The test server's in-memory state: notes and idempotency records, with switchable bugs.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::Bugs;

/// How long a racy request waits for a concurrent twin between its lookup and its insert.
const RENDEZVOUS: Duration = Duration::from_secs(1);

/// A response as the server stores and replays it.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) location: Option<String>,
    pub(crate) body: Vec<u8>,
}

enum Record {
    InFlight {
        fingerprint: String,
    },
    Done {
        fingerprint: String,
        response: Stored,
    },
}

impl Record {
    fn fingerprint(&self) -> &str {
        match self {
            Record::InFlight { fingerprint } | Record::Done { fingerprint, .. } => fingerprint,
        }
    }
}

/// What the lookup decided for a request.
pub(crate) enum Decision {
    Execute,
    Replay(Stored),
    Mismatch,
    InFlight,
}

#[derive(Default)]
struct Inner {
    records: HashMap<(String, String), Record>,
    notes: Vec<(String, Value)>,
}

/// Notes and records behind one mutex; `bugs` decides which corners are cut.
pub(crate) struct Store {
    pub(crate) bugs: Bugs,
    inner: Mutex<Inner>,
    arrivals: watch::Sender<HashMap<String, usize>>,
}

impl Store {
    pub(crate) fn new(bugs: Bugs) -> Self {
        Self {
            bugs,
            inner: Mutex::default(),
            arrivals: watch::Sender::new(HashMap::new()),
        }
    }

    /// The record's scope: (actor, key), or just the key when the actor is (wrongly) ignored.
    pub(crate) fn scope(&self, actor: &str, key: &str) -> (String, String) {
        let actor = if self.bugs.ignore_actor { "*" } else { actor };
        (actor.to_owned(), key.to_owned())
    }

    /// Looks the scope up; a correct store claims it in the same critical section.
    pub(crate) fn decide(&self, scope: &(String, String), fingerprint: &str) -> Decision {
        let mut inner = self.inner.lock().expect("store lock");
        let decision = match inner.records.get(scope) {
            None => Decision::Execute,
            Some(record) if record.fingerprint() != fingerprint && !self.bugs.no_fingerprint => {
                Decision::Mismatch
            }
            Some(Record::InFlight { .. }) => Decision::InFlight,
            Some(Record::Done { response, .. }) => Decision::Replay(response.clone()),
        };
        if matches!(decision, Decision::Execute) && !self.bugs.racy_claim {
            inner.records.insert(
                scope.clone(),
                Record::InFlight {
                    fingerprint: fingerprint.to_owned(),
                },
            );
        }
        decision
    }

    /// The racy store's window between lookup and insert: waits until a second request for the
    /// scope has passed its lookup too (or a bound passes), as the seed's barrier test does.
    pub(crate) async fn rendezvous(&self, scope: &(String, String)) {
        let name = format!("{}/{}", scope.0, scope.1);
        self.arrivals
            .send_modify(|seen| *seen.entry(name.clone()).or_default() += 1);
        let mut watcher = self.arrivals.subscribe();
        let twin = watcher.wait_for(|seen| seen.get(&name).copied().unwrap_or(0) >= 2);
        let _ = tokio::time::timeout(RENDEZVOUS, twin).await;
    }

    /// Completes (stores) or releases the scope according to the response and the bugs.
    pub(crate) fn finish(&self, scope: &(String, String), fingerprint: &str, response: &Stored) {
        let mut inner = self.inner.lock().expect("store lock");
        if response.status < 400 || self.bugs.store_failures {
            let record = Record::Done {
                fingerprint: fingerprint.to_owned(),
                response: response.clone(),
            };
            inner.records.insert(scope.clone(), record);
        } else {
            inner.records.remove(scope);
        }
    }

    /// Creates a note for `actor` from `body`, or answers 400 for an invalid body.
    pub(crate) fn create_note(&self, actor: &str, body: &[u8]) -> Stored {
        let Some(title) = valid_title(body) else {
            let problem = json!({"type": "validation", "title": "invalid note", "status": 400});
            return Stored {
                status: 400,
                content_type: "application/problem+json",
                location: None,
                body: problem.to_string().into_bytes(),
            };
        };
        let mut inner = self.inner.lock().expect("store lock");
        let id = format!("n{}", inner.notes.len() + 1);
        let created_at = format!("2026-11-01T00:00:{:02}Z", inner.notes.len() % 60);
        let note = json!({"id": id, "title": title, "created_at": created_at});
        inner.notes.push((actor.to_owned(), note.clone()));
        let location = Some(format!("/v1/notes/{id}"));
        Stored {
            status: 201,
            content_type: "application/json",
            location,
            body: note.to_string().into_bytes(),
        }
    }

    /// The actor's notes.
    pub(crate) fn notes(&self, actor: &str) -> Vec<Value> {
        let inner = self.inner.lock().expect("store lock");
        inner
            .notes
            .iter()
            .filter(|(owner, _)| owner == actor)
            .map(|(_, note)| note.clone())
            .collect()
    }
}

/// `{"title": STRING}` with 1..=200 characters after trimming, and no other member.
fn valid_title(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    let title = object.get("title")?.as_str()?.trim();
    let fits = object.len() == 1 && (1..=200).contains(&title.chars().count());
    fits.then(|| title.to_owned())
}

/// Sorted-key JSON for JSON bodies (so key order and whitespace do not matter), raw bytes else.
pub(crate) fn fingerprint(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => canonical(&value),
        Err(_) => format!("raw:{}", String::from_utf8_lossy(body)),
    }
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(members) => {
            let mut sorted: Vec<_> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), canonical(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        scalar => scalar.to_string(),
    }
}
