//! Slow clients against a real `idemkey serve`: connections that never finish
//! their headers, bodies that stall, and more of them than the connection cap. The server
//! closes each after its timeout, and a legitimate request is still answered.

use std::net::SocketAddr;
use std::time::Duration;

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::notes::{ALICE, create_titled};
use idemkey_test_support::serve::ServeSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::IDEMKEY;

/// The longest any step may take before the test gives up: far above the 1 s timeouts the
/// server runs with here, so it bounds a hang, not the server's speed.
const GUARD: Duration = Duration::from_secs(60);

/// Opens a connection and sends `bytes`, then keeps it open without sending more.
async fn stall(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// Reads until the server closes the connection; whatever it answered before.
async fn closed_by_server(mut stream: TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut answer))
        .await
        .expect("the server never closed a stalled connection")
        .ok();
    answer
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_and_a_legitimate_request_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Sqlite, dir.path()).await;
    let args = [
        "--header-timeout",
        "1s",
        "--body-timeout",
        "1s",
        "--max-connections",
        "16",
    ];
    let server = ServeSpec::new(IDEMKEY, db.url(), &args)
        .logged_in(dir.path())
        .start();
    let half_head = format!("POST /v1/notes HTTP/1.1\r\nHost: {}\r\n", server.addr);
    let half_body = format!(
        "POST /v1/notes HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {ALICE}\r\n\
         Idempotency-Key: stalled-body\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"title\":",
        server.addr
    );
    // Three times the cap of connections that never finish their headers, and a few whose
    // body stalls: all of them at once.
    let mut heads = Vec::new();
    for _ in 0..48 {
        heads.push(stall(server.addr, half_head.as_bytes()).await);
    }
    // Silent ones, and ones that stop inside the HTTP/2 preface, while the server still
    // looks at their first bytes to tell HTTP/1.1 from HTTP/2.
    for _ in 0..4 {
        heads.push(stall(server.addr, b"").await);
        heads.push(stall(server.addr, b"PRI * HTTP/2.0\r\n").await);
    }
    let mut bodies = Vec::new();
    for _ in 0..4 {
        bodies.push(stall(server.addr, half_body.as_bytes()).await);
    }
    let client = reqwest::Client::builder().timeout(GUARD).build().unwrap();
    let answered = create_titled(&client, server.addr, ALICE, "legitimate", "hello")
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 201);
    for stream in heads {
        closed_by_server(stream).await;
    }
    for stream in bodies {
        closed_by_server(stream).await;
    }
    // The stalled body created nothing; the legitimate request one note.
    let notes = client
        .get(format!("http://{}/v1/notes", server.addr))
        .header("authorization", format!("Bearer {ALICE}"))
        .send()
        .await
        .unwrap();
    let notes: serde_json::Value = notes.json().await.unwrap();
    assert_eq!(notes["notes"].as_array().map(Vec::len), Some(1), "{notes}");
}

#[idemkey_test_support::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Sqlite, dir.path()).await;
    let server = ServeSpec::new(IDEMKEY, db.url(), &["--header-timeout", "1s"])
        .logged_in(dir.path())
        .start();
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    let stream = stall(server.addr, request.as_bytes()).await;
    // Answered, then left idle: the server closes it.
    let answer = closed_by_server(stream).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
