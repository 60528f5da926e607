//! Bodies trickled into the proxy, one byte well inside the silence timeout each time, are cut
//! off at the body deadline: answered 408, their connections freed for the clients waiting,
//! nothing claimed, and no half body passed to the upstream as a whole one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkey_core::MemoryStore;
use idemkey_proxy::{Limits, Proxy, ProxyConfig, Upstream};
use idemkey_test_support::net::sockets::until_accepted;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::in_process::{ROUTE, content_length, read_message};

/// Only turns a hang into a failure: far above the 2 s deadline the proxy runs with here.
const GUARD: Duration = Duration::from_secs(60);

/// The request lines of the whole requests an upstream received.
type Received = Arc<Mutex<Vec<String>>>;

/// An upstream that answers every whole request 201 and notes its request line; a request
/// whose body ends short is never whole, so never noted.
async fn recording_upstream() -> (Upstream, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let noted = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let noted = noted.clone();
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                while let Some((head, _)) = read_message(&mut stream, &mut buffer).await {
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    noted.lock().unwrap().push(line);
                    let answer = "HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}";
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (
        Upstream::parse(&format!("http://{addr}")).unwrap(),
        received,
    )
}

/// A POST to `path` as alice, with `key` if any, whose head claims `length` body bytes.
fn head(path: &str, key: Option<&str>, length: usize) -> String {
    let key = key.map_or(String::new(), |key| format!("idempotency-key: {key}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer alice\r\n{key}\
         content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// Sends `head`, then one byte every `every` until the proxy answers and closes; what it
/// answered.
async fn trickle(addr: SocketAddr, head: String, every: Duration) -> String {
    let (mut reader, mut writer) = TcpStream::connect(addr).await.unwrap().into_split();
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
        // Until the proxy closes (a reset after its answer counts as closed too).
        while let Ok(n @ 1..) = reader.read(&mut chunk).await {
            answer.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    writing.abort();
    read.expect("the proxy held a trickled body past its deadline");
    String::from_utf8_lossy(&answer).into_owned()
}

/// A whole POST on a connection of its own: the head and body of the answer.
async fn send_whole(addr: SocketAddr, path: &str, key: Option<&str>) -> (String, Vec<u8>) {
    let mut client = TcpStream::connect(addr).await.unwrap();
    let request = format!("{}{{}}", head(path, key, 2));
    client.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = Vec::new();
    tokio::time::timeout(GUARD, read_message(&mut client, &mut buffer))
        .await
        .expect("never answered")
        .expect("closed without an answer")
}

/// Three trickled bodies hold all three of the proxy's connections, two on a recorded route
/// and one unrecorded (streamed to the upstream as it comes): each is answered 408 at the
/// deadline and closed, and a fourth client waiting for a connection is answered. The
/// upstream never received the trickled requests as whole ones, and the recorded key was
/// left unclaimed: sent whole, it is forwarded now, not answered 409 or replayed.
#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_are_cut_off_at_the_deadline_and_free_their_connections() {
    let (upstream, received) = recording_upstream().await;
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .config(ROUTE.parse::<ProxyConfig>().unwrap())
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits::default()
        .body_timeout(Duration::from_secs(10))
        .body_deadline(Duration::from_secs(2))
        .max_connections(3);
    tokio::spawn(proxy.serve(listener, limits, std::future::pending()));

    let every = Duration::from_millis(300);
    let heads = [
        head("/v1/trickled", Some("t0"), 100_000),
        head("/v1/trickled", Some("t1"), 100_000),
        head("/unrecorded", None, 100_000),
    ];
    let mut tricklers = Vec::new();
    for head in heads {
        tricklers.push(tokio::spawn(trickle(addr, head, every)));
    }
    // The three hold every connection before the fourth client comes, so it waits for one.
    until_accepted(addr, 3).await;
    let (fourth, _) = send_whole(addr, "/v1/fourth", Some("f")).await;
    assert!(fourth.starts_with("HTTP/1.1 201"), "{fourth}");
    for trickler in tricklers {
        let answer = trickler.await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("body-unreadable"), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
    }
    assert_eq!(
        *received.lock().unwrap(),
        ["POST /v1/fourth HTTP/1.1"],
        "a trickled request reached the upstream as a whole one"
    );

    let (retry, body) = send_whole(addr, "/v1/trickled", Some("t0")).await;
    assert!(retry.starts_with("HTTP/1.1 201"), "{retry}");
    assert!(!retry.contains("idempotent-replayed"), "{retry}");
    assert_eq!(content_length(&retry), Some(body.len()));
    assert_eq!(received.lock().unwrap().len(), 2);
}
