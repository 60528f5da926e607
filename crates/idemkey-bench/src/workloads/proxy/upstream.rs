//! The API behind the proxy in the proxy workloads: a small notes API kept in memory, served
//! by hyper on a runtime and an OS thread of its own in this process. It does as little as
//! an API can (no database, no framework), so that what a request through the proxy costs
//! more than one straight to it is the proxy's.
//!
//! `POST /v1/notes` takes any JSON body and answers 201 with `{"id": "N", "note": BODY}` and
//! `Location: /v1/notes/N`; `GET /v1/notes/N` answers that again, or 404. It ignores every
//! header, the credential and the proxy's `Idempotency-Derived-Key` included.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use anyhow::Context;
use bytes::Bytes;
use http::header::{CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The most notes kept: past it the oldest are dropped (about 150 MiB of the bench's
/// memory at most). Only the replay workload reads a note back, the one it has just made.
const MAX_NOTES: usize = 1 << 20;

/// The largest request body read, as the proxy's own limit on recorded requests.
const MAX_BODY: usize = 1024 * 1024;

/// The running upstream; stopped when dropped.
pub(crate) struct Upstream {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    /// Its thread's id, for its CPU time (`None` elsewhere than Linux).
    pub(crate) tid: Option<u32>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Starts it on a free port of 127.0.0.1, on a thread with a single-threaded runtime:
    /// the machine has few cores, and one is more than this API needs.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        let (ready_tx, ready_rx) = oneshot::channel();
        let (shutdown, stop) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("bench-upstream".into())
            .spawn(move || serve_on_this_thread(ready_tx, stop))
            .context("cannot start the upstream's thread")?;
        let (addr, tid) = ready_rx
            .await
            .context("the upstream stopped before listening")??;
        Ok(Self {
            addr,
            tid,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Its runtime drops every connection's task as it ends: this is quick.
            let _ = thread.join();
        }
    }
}

type Ready = anyhow::Result<(SocketAddr, Option<u32>)>;

fn serve_on_this_thread(ready: oneshot::Sender<Ready>, stop: oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = ready.send(Err(error.into()));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(error) => {
                let _ = ready.send(Err(error.into()));
                return;
            }
        };
        let addr = listener.local_addr();
        let _ = ready.send(
            addr.map(|addr| (addr, crate::harness::cpu::current_thread()))
                .map_err(Into::into),
        );
        let notes = Arc::new(Notes::default());
        tokio::select! {
            () = accept(listener, notes) => {},
            _ = stop => {},
        }
    });
}

async fn accept(listener: TcpListener, notes: Arc<Notes>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let notes = notes.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(notes.clone(), request));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The notes, by id: note `id` is at `(id - 1) % MAX_NOTES` while it is kept.
#[derive(Default)]
struct Notes {
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    /// `(id, answer body)`.
    notes: Vec<(u64, Bytes)>,
    last: u64,
}

impl Notes {
    /// Keeps `body` (JSON) as a new note; its id and the answer that shows it.
    fn insert(&self, body: &[u8]) -> (u64, Bytes) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.last += 1;
        let id = ring.last;
        let mut answer = Vec::with_capacity(body.len() + 32);
        answer.extend_from_slice(format!(r#"{{"id":"{id}","note":"#).as_bytes());
        answer.extend_from_slice(body);
        answer.push(b'}');
        let answer = Bytes::from(answer);
        let at = slot(id);
        if at < ring.notes.len() {
            ring.notes[at] = (id, answer.clone());
        } else {
            ring.notes.push((id, answer.clone()));
        }
        (id, answer)
    }

    fn get(&self, id: u64) -> Option<Bytes> {
        if id == 0 {
            return None;
        }
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let (kept, answer) = ring.notes.get(slot(id))?;
        (*kept == id).then(|| answer.clone())
    }
}

fn slot(id: u64) -> usize {
    ((id - 1) % MAX_NOTES as u64) as usize
}

async fn handle(
    notes: Arc<Notes>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    Ok(match (&parts.method, path.strip_prefix("/v1/notes")) {
        (&Method::POST, Some("")) => {
            let Ok(body) = Limited::new(body, MAX_BODY).collect().await else {
                return Ok(answer(StatusCode::PAYLOAD_TOO_LARGE, Bytes::new()));
            };
            let body = body.to_bytes();
            if serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
                return Ok(answer(StatusCode::BAD_REQUEST, Bytes::new()));
            }
            let (id, json) = notes.insert(&body);
            let mut response = answer(StatusCode::CREATED, json);
            if let Ok(location) = HeaderValue::try_from(format!("/v1/notes/{id}")) {
                response.headers_mut().insert(LOCATION, location);
            }
            response
        }
        (&Method::GET, Some(id)) => match id
            .strip_prefix('/')
            .and_then(|id| id.parse().ok())
            .and_then(|id| notes.get(id))
        {
            Some(json) => answer(StatusCode::OK, json),
            None => answer(StatusCode::NOT_FOUND, Bytes::new()),
        },
        _ => answer(StatusCode::NOT_FOUND, Bytes::new()),
    })
}

fn answer(status: StatusCode, json: Bytes) -> Response<Full<Bytes>> {
    let empty = json.is_empty();
    let mut response = Response::new(Full::new(json));
    *response.status_mut() = status;
    if !empty {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::client::{Conn, Target, note_body, note_id};

    #[tokio::test]
    async fn creates_are_kept_and_read_back_and_the_rest_is_404() {
        let upstream = Upstream::start().await.unwrap();
        let target = Target::new(upstream.addr, "t").unwrap();
        let mut conn = Conn::open(&target).await.unwrap();
        let created = conn.create(None, note_body("a")).await.unwrap();
        assert_eq!(created.status, StatusCode::CREATED);
        let id = note_id(&created).unwrap();
        let read = conn.get(&format!("/v1/notes/{id}")).await.unwrap();
        assert_eq!((read.status, &read.body), (StatusCode::OK, &created.body));
        let json: serde_json::Value = serde_json::from_slice(&read.body).unwrap();
        assert_eq!(json["note"]["title"], "a");
        for path in ["/v1/notes/0", "/v1/notes/99", "/v1/notes/x", "/v1/other"] {
            assert_eq!(conn.get(path).await.unwrap().status, StatusCode::NOT_FOUND);
        }
        let bad = conn
            .create(None, Bytes::from_static(b"{nope"))
            .await
            .unwrap();
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn the_oldest_notes_go_past_the_bound() {
        let notes = Notes::default();
        assert_eq!(slot(1), 0);
        assert_eq!(slot(MAX_NOTES as u64 + 1), 0);
        let (first, _) = notes.insert(b"1");
        assert!(notes.get(first).is_some() && notes.get(0).is_none());
        notes.ring.lock().unwrap().last = MAX_NOTES as u64;
        let (wrapped, _) = notes.insert(b"2");
        assert_eq!(slot(wrapped), slot(first));
        assert!(notes.get(first).is_none() && notes.get(wrapped).is_some());
    }
}
