//! The upstream's HTTP side: its thread's runtime, the accept loop, and the two routes over
//! whichever notes it keeps.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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

use super::{UpstreamKind, memory, sqlite};

/// The largest request body read, as the proxy's own limit on recorded requests.
const MAX_BODY: usize = 1024 * 1024;

/// Where it listens and its thread's id, or why it could not start.
pub(super) type Ready = anyhow::Result<(SocketAddr, Option<u32>)>;

/// The notes, in memory or in a SQLite file.
enum Notes {
    Memory(memory::Notes),
    Sqlite(sqlite::Notes),
}

impl Notes {
    async fn open(kind: UpstreamKind, file: Option<PathBuf>) -> anyhow::Result<Self> {
        Ok(match (kind.sqlite(), file) {
            (Some((synchronous, threads)), Some(file)) => {
                Self::Sqlite(sqlite::Notes::open(&file, synchronous, threads).await?)
            }
            _ => Self::Memory(memory::Notes::default()),
        })
    }

    async fn insert(&self, body: &[u8]) -> anyhow::Result<(u64, Bytes)> {
        match self {
            Self::Memory(notes) => Ok(notes.insert(body)),
            Self::Sqlite(notes) => notes.insert(body).await,
        }
    }

    async fn get(&self, id: u64) -> anyhow::Result<Option<Bytes>> {
        match self {
            Self::Memory(notes) => Ok(notes.get(id)),
            Self::Sqlite(notes) => notes.get(id).await,
        }
    }
}

/// Opens the notes, listens, tells `ready`, and serves until `stop`.
pub(super) fn on_this_thread(
    kind: UpstreamKind,
    file: Option<PathBuf>,
    ready: oneshot::Sender<Ready>,
    stop: oneshot::Receiver<()>,
) {
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
        let (listener, addr, notes) = match open(kind, file).await {
            Ok(opened) => opened,
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        let _ = ready.send(Ok((addr, crate::harness::cpu::current_thread())));
        let notes = Arc::new(notes);
        tokio::select! {
            () = accept(listener, notes.clone()) => {},
            _ = stop => {},
        }
        if let Notes::Sqlite(notes) = &*notes {
            notes.close().await;
        }
    });
}

/// The notes opened, and a listener on a free port of 127.0.0.1.
async fn open(
    kind: UpstreamKind,
    file: Option<PathBuf>,
) -> anyhow::Result<(TcpListener, SocketAddr, Notes)> {
    let notes = Notes::open(kind, file).await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr, notes))
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
            match notes.insert(&body).await {
                Ok((id, json)) => {
                    let mut response = answer(StatusCode::CREATED, json);
                    if let Ok(location) = HeaderValue::try_from(format!("/v1/notes/{id}")) {
                        response.headers_mut().insert(LOCATION, location);
                    }
                    response
                }
                Err(error) => failed(&error),
            }
        }
        (&Method::GET, Some(id)) => match id.strip_prefix('/').and_then(|id| id.parse().ok()) {
            Some(id) => match notes.get(id).await {
                Ok(Some(json)) => answer(StatusCode::OK, json),
                Ok(None) => answer(StatusCode::NOT_FOUND, Bytes::new()),
                Err(error) => failed(&error),
            },
            None => answer(StatusCode::NOT_FOUND, Bytes::new()),
        },
        _ => answer(StatusCode::NOT_FOUND, Bytes::new()),
    })
}

/// A 500 for a failed SQLite statement, which the bench counts as an error of its side.
fn failed(error: &anyhow::Error) -> Response<Full<Bytes>> {
    tracing::warn!(error = %format!("{error:#}"), "the upstream's notes failed");
    answer(StatusCode::INTERNAL_SERVER_ERROR, Bytes::new())
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
