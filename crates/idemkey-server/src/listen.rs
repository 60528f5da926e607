//! The HTTP/1.1 and HTTP/2 (cleartext, prior knowledge) server of `idemkey serve` and
//! `idemkey proxy`, with the bounds that keep slow or hostile clients
//! from exhausting it (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)): a header read timeout, a body inactivity timeout, a
//! deadline on a whole body ([`body_time`](crate::body_time)) and a cap on open
//! connections. `axum::serve` has none of them: a client that sent half its headers kept its
//! connection, and a file descriptor, for as long as it liked.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use crate::body_time::{self, BodyTime};

/// How long an accept error (out of file descriptors) pauses accepting.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The bounds on clients' connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    header_read_timeout: Duration,
    body_timeout: Duration,
    body_deadline: Duration,
    max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            body_deadline: Duration::from_secs(60),
            max_connections: 1024,
        }
    }
}

impl Limits {
    /// How long a client may take to send a request's headers; hyper starts the clock when
    /// the connection waits for a request, so it also closes idle keep-alive connections.
    /// Defaults to 10 s.
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// How long a request body may go without sending anything. Defaults to 10 s.
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// How long a whole request body may take, counted from the request's head, however
    /// steadily it arrives: a body trickled inside the [`body_timeout`](Self::body_timeout)
    /// cannot hold its connection past it. A body cut off by either bound is answered 408
    /// `body-unreadable`, before anything runs, and its connection closed. Defaults to 60 s;
    /// raise it for large uploads over slow links.
    #[must_use]
    pub fn body_deadline(mut self, deadline: Duration) -> Self {
        self.body_deadline = deadline;
        self
    }

    /// Connections open at once; the next waits in the kernel's accept queue. Defaults to
    /// 1024; 0 counts as 1.
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then lets the open
/// connections finish the requests they are serving.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let time = BodyTime {
        silence: limits.body_timeout,
        deadline: limits.body_deadline,
    };
    let app = app.layer(axum::middleware::from_fn_with_state(time, body_time::bound));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &slots) => accepted,
            () = &mut shutdown => break,
        };
        let Some((stream, peer, slot)) = accepted else {
            break;
        };
        // The client's address, for handlers that name it (the proxy's `X-Forwarded-For`).
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request
            },
        ));
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let served = match speaks_h2(&stream, limits.header_read_timeout).await {
                // Said nothing, or not soon enough: closed, like a request's slow headers.
                None => Ok(()),
                Some(false) => {
                    let mut builder = http1::Builder::new();
                    builder
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.header_read_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(true) => {
                    let mut builder = http2::Builder::new(TokioExecutor::new());
                    builder
                        .timer(TokioTimer::new())
                        .max_concurrent_streams(MAX_STREAMS)
                        .keep_alive_interval(Some(limits.header_read_timeout))
                        .keep_alive_timeout(limits.header_read_timeout);
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Requests one HTTP/2 connection may have open at once: each holds a task and its body.
const MAX_STREAMS: u32 = 100;

/// The HTTP/2 connection preface (RFC 9113 §3.4): a client with prior knowledge sends it
/// first. No TLS here, so no ALPN: cleartext HTTP/2 is only ever prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client opens with the HTTP/2 preface, looking at its first bytes without
/// consuming them; `None` if it closes, or sends too little within `within`. An HTTP/1.1
/// request differs by its second byte at the latest.
async fn speaks_h2(stream: &TcpStream, within: Duration) -> Option<bool> {
    let read = async {
        let mut seen = [0; H2_PREFACE.len()];
        loop {
            let n = stream.peek(&mut seen).await.ok()?;
            if n == 0 {
                return None;
            }
            if seen[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // A partial preface: `peek` would return the same bytes at once, so wait a little.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, read).await.ok().flatten()
}

/// The next connection, once a slot is free; `None` if the slots are gone (never, here).
async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let slot = slots.clone().acquire_owned().await.ok()?;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => return Some((stream, peer, slot)),
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}
