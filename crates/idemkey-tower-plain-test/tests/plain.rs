//! The lease layer in plain hyper, with axum absent from the dependency tree.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::Command;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Sends one keyed POST: its status, `Idempotent-Replayed` header and body.
async fn post(address: SocketAddr, body: &'static str) -> (StatusCode, bool, Bytes) {
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = Request::post("/v1/notes")
        .header("host", "localhost")
        .header("idempotency-key", "order-42")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, replayed, body)
}

#[tokio::test]
async fn a_retry_is_replayed_and_another_body_is_key_reused() {
    let address = idemkey_tower_plain_test::serve().await.unwrap();
    let first = post(address, r#"{"title":"hello"}"#).await;
    assert_eq!(
        first,
        (StatusCode::CREATED, false, r#"{"title":"hello"}"#.into())
    );
    let retry = post(address, r#"{"title":"hello"}"#).await;
    assert_eq!(retry, (StatusCode::CREATED, true, first.2));
    let (status, _, _) = post(address, r#"{"title":"other"}"#).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

/// The crate's normal dependencies (what an application without axum would build) hold no
/// axum: idemkey-tower's default features are off.
#[test]
fn axum_is_not_in_the_dependency_tree() {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "-p",
            env!("CARGO_PKG_NAME"),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    assert!(tree.contains("idemkey-tower"), "{tree}");
    assert!(!tree.contains("axum"), "{tree}");
}
