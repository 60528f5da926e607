//! Slow clients against a real `idemkey serve`: connections that never finish
//! their headers, bodies that stall, and more of them than the connection cap. The server
//! closes each after its timeout, and a legitimate request is still answered.

use std::net::SocketAddr;
use std::time::Duration;

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::sockets::until_accepted;
use idemkey_test_support::process::binary;
use idemkey_test_support::process::notes::{ALICE, count_notes, create_titled};
use idemkey_test_support::process::serve::ServeSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    let server = ServeSpec::new(binary::idemkey(), db.url(), &args)
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
    assert_eq!(count_notes(&client, &server, ALICE).await, 1);
}

#[idemkey_test_support::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Sqlite, dir.path()).await;
    let server = ServeSpec::new(binary::idemkey(), db.url(), &["--header-timeout", "1s"])
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

/// The head of a create whose body claims more bytes than it will ever send.
fn trickled_create(addr: SocketAddr, key: &str) -> String {
    format!(
        "POST /v1/notes HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ALICE}\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{\"title\":\""
    )
}

/// Sends `head`, then one byte every `every` until the server answers and closes; what it
/// answered. The bytes come far more often than the silence timeout, so only a bound on the
/// body's total time ends it.
async fn trickle(addr: SocketAddr, head: String, every: Duration) -> Vec<u8> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let writing = tokio::spawn(async move {
        let mut sent = writer.write_all(head.as_bytes()).await;
        while sent.is_ok() {
            tokio::time::sleep(every).await;
            sent = writer.write_all(b"x").await;
        }
    });
    let mut answer = Vec::new();
    let read = tokio::time::timeout(GUARD, async {
        let mut chunk = [0; 4096];
        // Until the server closes (a reset after its answer counts as closed too).
        while let Ok(n @ 1..) = reader.read(&mut chunk).await {
            answer.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    writing.abort();
    read.expect("the server held a trickled body past its deadline");
    answer
}

/// Three clients trickle their bodies, one byte every 300 ms under a 10 s silence timeout,
/// into all three of the server's connections: each is answered 408 at the 2 s deadline and
/// closed, nothing is claimed, and a fourth client waiting for a connection is answered.
/// In both modes: lease mode is the one that claims before its handler runs.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_are_cut_off_at_the_deadline_and_free_their_connections() {
    for mode in ["atomic", "lease"] {
        trickled_bodies_are_cut_off(mode).await;
    }
}

async fn trickled_bodies_are_cut_off(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Sqlite, dir.path()).await;
    let args = [
        "--mode",
        mode,
        "--body-timeout",
        "10s",
        "--body-deadline",
        "2s",
        "--max-connections",
        "3",
    ];
    let server = ServeSpec::new(binary::idemkey(), db.url(), &args)
        .logged_in(dir.path())
        .start();
    let every = Duration::from_millis(300);
    let mut tricklers = Vec::new();
    for i in 0..3 {
        let head = trickled_create(server.addr, &format!("trickled-{i}"));
        tricklers.push(tokio::spawn(trickle(server.addr, head, every)));
    }
    // The three hold every connection before the fourth client comes, so it waits for one.
    until_accepted(server.addr, 3).await;
    let client = reqwest::Client::builder().timeout(GUARD).build().unwrap();
    let fourth = create_titled(&client, server.addr, ALICE, "fourth", "fourth")
        .send()
        .await
        .expect("the fourth client was never answered");
    assert_eq!(fourth.status(), 201, "{mode}");
    for trickler in tricklers {
        let answer = trickler.await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{mode}: {answer}");
        assert!(answer.contains("body-unreadable"), "{mode}: {answer}");
    }
    // The cut-off requests claimed nothing: sent whole, one executes now, not replayed.
    let keys: Vec<String> = db.records().await.into_iter().map(|(key, _)| key).collect();
    assert_eq!(keys, ["fourth"], "{mode}");
    let retry = create_titled(&client, server.addr, ALICE, "trickled-0", "whole")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201, "{mode}");
    assert!(
        retry.headers().get("idempotent-replayed").is_none(),
        "{mode}"
    );
}

#[idemkey_test_support::test]
fn a_zero_body_deadline_is_refused_in_one_line() {
    for command in [
        &["serve", "--body-deadline", "0"][..],
        &[
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--body-deadline",
            "0s",
        ],
    ] {
        let output = crate::idemkey(command);
        assert_eq!(output.status.code(), Some(2), "{command:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("a body deadline must be at least 100ms"),
            "{stderr}"
        );
    }
}
