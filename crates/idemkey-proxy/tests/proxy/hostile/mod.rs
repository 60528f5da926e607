//! The proxy between a hostile upstream and a hostile client: an upstream's framing never
//! reaches the client's connection, a client never sends the upstream a derived key, nor
//! forwarding headers of its own.

mod admin;
mod anonymous;
mod caps;
mod forwarding;
mod keyed;
mod paths;
mod slow_bodies;

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::{HeaderMap, Request};
use idemkey_core::MemoryStore;
use idemkey_proxy::{Limits, Proxy, ProxyConfig, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use crate::in_process::{ROUTE, body_text, content_length, read_message, serve};

/// What the hostile upstream hides in its chunk, past the 5 bytes its `Content-Length` claims.
const SMUGGLED: &str = "HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\nsmuggled";

/// An upstream that answers a POST with both `Transfer-Encoding: chunked` and
/// `Content-Length: 5` and a chunk longer than 5 bytes, and any other request plainly.
async fn framing_upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer_hostile(stream));
        }
    });
    Upstream::parse(&format!("http://{addr}")).unwrap()
}

async fn answer_hostile(mut stream: TcpStream) {
    let mut buffer = Vec::new();
    while let Some((head, _)) = read_message(&mut stream, &mut buffer).await {
        let answer = if head.starts_with("POST") {
            let chunk = format!("hello{SMUGGLED}");
            format!(
                "HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n\
                 {:x}\r\n{chunk}\r\n0\r\n\r\n",
                chunk.len()
            )
        } else {
            "HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\nupstream GET".to_owned()
        };
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

const POST: &str = "POST /v1/items HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer alice\r\n\
                    idempotency-key: k1\r\ncontent-length: 2\r\n\r\n{}";
const GET: &str = "GET /v1/items HTTP/1.1\r\nhost: proxy\r\n\r\n";

#[idemkey_test_support::test]
async fn an_upstream_answer_with_two_framings_never_desynchronises_the_client() {
    let proxy = serve(framing_upstream().await).await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    let mut buffer = Vec::new();
    client.write_all(POST.as_bytes()).await.unwrap();
    let (head, body) = read_message(&mut client, &mut buffer).await.unwrap();
    assert_eq!(content_length(&head), Some(body.len()), "{head}");
    // Ambiguous framing is a failure of the upstream, never an answer to store as a success.
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("upstream-outcome-unknown"));

    client.write_all(GET.as_bytes()).await.unwrap();
    let (head, body) = read_message(&mut client, &mut buffer).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, b"upstream GET");
    assert!(buffer.is_empty(), "{}", String::from_utf8_lossy(&buffer));

    // The retry is told the same: the record stored the unknown outcome.
    client.write_all(POST.as_bytes()).await.unwrap();
    let (head, _) = read_message(&mut client, &mut buffer).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
}

/// An unrecorded answer streams: ambiguous framing is a failure there too, never an answer
/// cut to the upstream's `Content-Length`.
#[idemkey_test_support::test]
async fn an_unrecorded_answer_with_two_framings_keeps_the_client_in_step() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = Vec::new();
        read_message(&mut stream, &mut buffer).await.unwrap();
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n\
                      7\r\nhello!!\r\n0\r\n\r\n";
        stream.write_all(answer.as_bytes()).await.unwrap();
    });
    let proxy = serve(Upstream::parse(&format!("http://{addr}")).unwrap()).await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    let mut buffer = Vec::new();
    client.write_all(GET.as_bytes()).await.unwrap();
    let (head, body) = read_message(&mut client, &mut buffer).await.unwrap();
    assert_eq!(content_length(&head), Some(body.len()), "{head}");
    // Never the first 5 bytes of the body passed off as the whole of it.
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    assert!(buffer.is_empty(), "{}", String::from_utf8_lossy(&buffer));
}

/// An upstream that answers with the derived key it received, or `none`.
async fn echoing_upstream() -> Upstream {
    let app = Router::new().fallback(any(|headers: HeaderMap| async move {
        headers
            .get("idempotency-derived-key")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("none")
            .to_owned()
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Upstream::parse(&format!("http://{addr}")).unwrap()
}

async fn received_key(proxy: &Proxy<MemoryStore>, request: Request<Body>) -> String {
    body_text(proxy.service().oneshot(request).await.unwrap()).await
}

#[idemkey_test_support::test]
async fn a_client_never_sends_the_upstream_a_derived_key() {
    let proxy = Proxy::builder(echoing_upstream().await, MemoryStore::new())
        .config(ROUTE.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    let forged = "forged";
    let get = Request::get("/v1/items")
        .header("host", "proxy")
        .header("idempotency-derived-key", forged)
        .body(Body::empty())
        .unwrap();
    assert_eq!(received_key(&proxy, get).await, "none");
    let keyless = Request::post("/v1/items")
        .header("host", "proxy")
        .header("authorization", "Bearer alice")
        .header("idempotency-derived-key", forged)
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(received_key(&proxy, keyless).await, "none");
    let keyed = Request::post("/v1/items")
        .header("host", "proxy")
        .header("authorization", "Bearer alice")
        .header("idempotency-key", "k1")
        .header("idempotency-derived-key", forged)
        .body(Body::from("{}"))
        .unwrap();
    let derived = received_key(&proxy, keyed).await;
    assert!(derived != forged && derived != "none", "{derived}");
}

/// An upstream that accepts connections and reads them, never answering but for `head`,
/// which it sends at once: each connection stays open until the proxy closes it.
async fn stalling_upstream(head: String) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let head = head.clone();
            tokio::spawn(async move {
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut sink = [0; 4096];
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    Upstream::parse(&format!("http://{addr}")).unwrap()
}

/// The proxy serving `upstream` with a one-second upstream timeout.
async fn serve_with_timeout(upstream: Upstream) -> std::net::SocketAddr {
    let config = format!("{ROUTE}\n[upstream]\ntimeout = \"1s\"");
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .config(config.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.serve(listener, Limits::default(), std::future::pending()));
    addr
}

#[idemkey_test_support::test]
async fn a_malformed_body_on_an_unrecorded_request_is_the_clients_fault() {
    let proxy = serve_with_timeout(stalling_upstream(String::new()).await).await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    let request = "POST /other HTTP/1.1\r\nhost: proxy\r\ntransfer-encoding: chunked\r\n\r\n\
                   zz\r\nnot a chunk\r\n0\r\n\r\n";
    client.write_all(request.as_bytes()).await.unwrap();
    let (head, body) = read_message(&mut client, &mut Vec::new()).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("body-unreadable"));
}

#[idemkey_test_support::test]
async fn a_stalled_unrecorded_body_ends_the_answer() {
    let upstream =
        stalling_upstream("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc".to_owned()).await;
    let proxy = serve_with_timeout(upstream).await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    client.write_all(GET.as_bytes()).await.unwrap();
    // The answer's head came; its body never completes, and the proxy ends the connection
    // rather than hold it. The guard only turns a hang into a failure.
    let guard = std::time::Duration::from_secs(30);
    let read = tokio::time::timeout(guard, read_message(&mut client, &mut Vec::new())).await;
    assert_eq!(read.expect("the proxy held the client"), None);
}

#[idemkey_test_support::test]
async fn a_stalled_tail_of_a_long_recorded_body_ends_the_answer() {
    // Past the 1 MiB the proxy reads ahead, the rest of a recorded answer streams.
    let sent = "x".repeat(1536 * 1024);
    let head = format!("HTTP/1.1 201 Created\r\ncontent-length: 2097152\r\n\r\n{sent}");
    let proxy = serve_with_timeout(stalling_upstream(head).await).await;
    let mut client = TcpStream::connect(proxy).await.unwrap();
    client.write_all(POST.as_bytes()).await.unwrap();
    // Chunked to the client: its connection ends before the last chunk.
    let guard = std::time::Duration::from_secs(30);
    let mut received = Vec::new();
    let read = tokio::time::timeout(guard, client.read_to_end(&mut received)).await;
    assert!(read.expect("the proxy held the client").is_ok());
    assert!(received.starts_with(b"HTTP/1.1 201"));
    assert!(!received.ends_with(b"\r\n0\r\n\r\n"));
}
