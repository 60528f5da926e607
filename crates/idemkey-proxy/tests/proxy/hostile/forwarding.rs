//! Forwarding headers are the proxy's own: whatever a client sends of them, over HTTP/1.0,
//! HTTP/1.1 or h2c, the upstream gets what the proxy saw; a request whose host is missing,
//! doubled or malformed is refused before any route.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::any;
use http::{HeaderMap, Request, Version};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemkey_proxy::Upstream;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::in_process::{read_message, serve};

/// Forwarding headers a client forges, each of which an upstream might trust.
const FORGED: &str = "x-forwarded-host: evil.example\r\nx-forwarded-for: 6.6.6.6\r\n\
                      x-forwarded-proto: https\r\nx-forwarded-port: 443\r\n\
                      forwarded: for=6.6.6.6;host=evil.example\r\nx-real-ip: 6.6.6.6\r\n";

/// What the upstream got when the proxy saw `api.example` from 127.0.0.1.
const SEEN: &str = "forwarded: for=127.0.0.1;host=\"api.example\";proto=http\n\
                    x-forwarded-for: 127.0.0.1\nx-forwarded-host: api.example\n\
                    x-forwarded-proto: http\n";

/// An upstream that answers with the forwarding headers it received, one line each, sorted,
/// and counts the requests it got.
async fn echoing_upstream() -> (Upstream, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = Router::new().fallback(any(move |headers: HeaderMap| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { forwarding_lines(&headers) }
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (Upstream::parse(&format!("http://{addr}")).unwrap(), calls)
}

fn forwarding_lines(headers: &HeaderMap) -> String {
    let mut lines: Vec<String> = headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name.starts_with("x-forwarded-") || name == "forwarded" || name == "x-real-ip"
        })
        .map(|(name, value)| format!("{name}: {}\n", value.to_str().unwrap()))
        .collect();
    lines.sort();
    lines.concat()
}

/// Sends `request` on a connection of its own: the head and body of the proxy's answer.
async fn send(proxy: std::net::SocketAddr, request: &str) -> (String, String) {
    let mut client = TcpStream::connect(proxy).await.unwrap();
    client.write_all(request.as_bytes()).await.unwrap();
    let (head, body) = read_message(&mut client, &mut Vec::new()).await.unwrap();
    (head, String::from_utf8(body).unwrap())
}

#[idemkey_test_support::test]
async fn a_clients_forwarding_headers_never_reach_the_upstream() {
    let (upstream, _) = echoing_upstream().await;
    let proxy = serve(upstream).await;
    let plain = format!("GET /echo HTTP/1.1\r\nhost: api.example\r\n{FORGED}\r\n");
    assert_eq!(send(proxy, &plain).await.1, SEEN);
    // `Connection` may name headers to drop, but never the host the proxy saw, nor the
    // forwarding headers it sets.
    let nominated = format!(
        "GET /echo HTTP/1.1\r\nhost: api.example\r\n\
         connection: close, host, x-forwarded-for, forwarded\r\n{FORGED}\r\n"
    );
    assert_eq!(send(proxy, &nominated).await.1, SEEN);
    let recorded = format!(
        "POST /v1/items HTTP/1.1\r\nhost: api.example\r\nauthorization: Bearer alice\r\n\
         idempotency-key: k1\r\ncontent-length: 2\r\n{FORGED}\r\n{{}}"
    );
    assert_eq!(send(proxy, &recorded).await.1, SEEN);
    // HTTP/1.0 may leave out the host: then the proxy names none.
    let old = format!("GET /echo HTTP/1.0\r\n{FORGED}\r\n");
    assert_eq!(
        send(proxy, &old).await.1,
        "forwarded: for=127.0.0.1;proto=http\nx-forwarded-for: 127.0.0.1\n\
         x-forwarded-proto: http\n"
    );
}

#[idemkey_test_support::test]
async fn forwarding_headers_over_h2c_are_the_proxys_own() {
    let (upstream, _) = echoing_upstream().await;
    let proxy = serve(upstream).await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Body>();
    let mut request = Request::get(format!("http://{proxy}/echo"))
        .version(Version::HTTP_2)
        .body(Body::empty())
        .unwrap();
    for line in FORGED.lines() {
        let (name, value) = line.split_once(": ").unwrap();
        let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        request.headers_mut().append(name, value.parse().unwrap());
    }
    let response = client.request(request).await.unwrap();
    assert_eq!(response.version(), Version::HTTP_2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8(body.to_vec()).unwrap(),
        format!(
            "forwarded: for=127.0.0.1;host=\"{proxy}\";proto=http\n\
             x-forwarded-for: 127.0.0.1\nx-forwarded-host: {proxy}\nx-forwarded-proto: http\n"
        )
    );
}

#[idemkey_test_support::test]
async fn a_missing_doubled_or_malformed_host_is_refused() {
    let (upstream, calls) = echoing_upstream().await;
    let proxy = serve(upstream).await;
    let hosts = [
        "",
        "host: api.example\r\nhost: evil.example\r\n",
        "host: api.example\";for=evil\r\n",
        "host: api.example, evil.example\r\n",
        "host: alice@api.example\r\n",
        "host: api.example:80x\r\n",
        "host: [::1\r\n",
        "host: api example\r\n",
    ];
    for host in hosts {
        for request in [
            format!("GET /echo HTTP/1.1\r\n{host}\r\n"),
            format!(
                "POST /v1/items HTTP/1.1\r\n{host}authorization: Bearer alice\r\n\
                 idempotency-key: k1\r\ncontent-length: 2\r\n\r\n{{}}"
            ),
        ] {
            let (head, body) = send(proxy, &request).await;
            assert!(head.starts_with("HTTP/1.1 400"), "{host:?}: {head}");
            assert!(head.contains("application/problem+json"), "{head}");
            assert!(body.contains("bad-target"), "{body}");
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A well-formed host passes: a name, an IPv4 or bracketed IPv6 address, with a port.
    for host in ["api.example:8080", "127.0.0.1", "[::1]:80"] {
        let (head, _) = send(
            proxy,
            &format!("GET /echo HTTP/1.1\r\nhost: {host}\r\n\r\n"),
        )
        .await;
        assert!(head.starts_with("HTTP/1.1 200"), "{host}: {head}");
    }
}
