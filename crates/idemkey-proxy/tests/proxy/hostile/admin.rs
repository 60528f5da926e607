//! The admin listener is served through the same bounded accept loop as the main one: a
//! client that sends half a request is closed after the header timeout, not held.

use std::time::Duration;

use idemkey_core::MemoryStore;
use idemkey_proxy::{Limits, Proxy, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[idemkey_test_support::test]
async fn the_admin_listener_closes_a_half_sent_request() {
    let upstream = Upstream::parse("http://127.0.0.1:9").unwrap();
    let proxy = Proxy::builder(upstream, MemoryStore::new())
        .build()
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let limits = Limits::default().header_read_timeout(Duration::from_secs(1));
    let serving = proxy.serve_admin(listener, String::new, limits, std::future::pending());
    tokio::spawn(serving);
    let mut client = TcpStream::connect(admin).await.unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: admin\r\n")
        .await
        .unwrap();
    // The guard only turns a hang into a failure: the header timeout is 1 s.
    let guard = Duration::from_secs(30);
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(guard, client.read_to_end(&mut answer)).await;
    assert!(
        closed.is_ok(),
        "the admin listener held a half-sent request"
    );
    // A whole request is still answered.
    let mut client = TcpStream::connect(admin).await.unwrap();
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}
