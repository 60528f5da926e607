//! What the in-process tests share: the proxy served on a listener of its own, an upstream
//! that counts what it runs, and HTTP/1.1 messages read off a raw socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::StatusCode;
use idemkey_core::MemoryStore;
use idemkey_proxy::{Limits, Proxy, ProxyConfig, Upstream};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// The route the tests cover: POSTs under `/v1/`.
pub(crate) const ROUTE: &str = "[[route]]\nmethods = [\"POST\"]\npath = \"/v1/*\"";

/// The proxy serving `upstream` on a listener of its own, covering POSTs under `/v1/`.
pub(crate) async fn serve(upstream: Upstream) -> SocketAddr {
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .config(ROUTE.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let forever = std::future::pending::<()>();
    tokio::spawn(proxy.serve(listener, Limits::default(), forever));
    addr
}

/// An upstream that answers 201 `call N` and counts the requests it received.
pub(crate) async fn counting_upstream() -> (Upstream, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = Router::new().fallback(any(move || {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        async move { (StatusCode::CREATED, format!("call {n}")) }
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (Upstream::parse(&format!("http://{addr}")).unwrap(), calls)
}

/// The body of one of the proxy's answers, as text.
pub(crate) async fn body_text(response: http::Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Reads one message framed by `Content-Length` (or none) from `stream`, keeping what
/// follows it in `buffer` for the next: the head as text, and the body.
pub(crate) async fn read_message(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        fill(stream, buffer).await?;
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let length = content_length(&head).unwrap_or(0);
    while buffer.len() < end + length {
        fill(stream, buffer).await?;
    }
    let body = buffer[end..end + length].to_vec();
    buffer.drain(..end + length);
    Some((head, body))
}

async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buffer.extend_from_slice(&chunk[..n]);
            Some(())
        }
    }
}

/// The `Content-Length` of a message head, if it has one.
pub(crate) fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}
