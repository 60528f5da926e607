//! The lossy relay produces each fault it promises, and counts it: answers lost after the
//! server received the whole request (on a fresh or a reused connection), answers cut,
//! connections reset or refused, and an upstream that is down and comes back.
#![allow(clippy::unwrap_used)]

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemkey_test_support::net::lossy::{Counts, Faults, LossyRelay};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// A tiny keep-alive HTTP/1.1 server: it reports each whole request it read, then answers
/// `done: <body>` in one write.
struct Upstream {
    addr: SocketAddr,
    received: mpsc::UnboundedReceiver<Vec<u8>>,
    sender: mpsc::UnboundedSender<Vec<u8>>,
    connections: Arc<AtomicU64>,
    task: Option<JoinHandle<()>>,
}

impl Upstream {
    fn start() -> Self {
        let (sender, received) = mpsc::unbounded_channel();
        let mut upstream = Self {
            addr: "127.0.0.1:0".parse().unwrap(),
            received,
            sender,
            connections: Arc::default(),
            task: None,
        };
        upstream.restart();
        upstream
    }

    /// Listens again on the same address (the first time, on a free one).
    fn restart(&mut self) {
        let listener = bind(self.addr);
        self.addr = listener.local_addr().unwrap();
        let (sender, connections) = (self.sender.clone(), self.connections.clone());
        self.task = Some(tokio::spawn(async move {
            let mut tasks = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                tasks.spawn(answer(stream, sender.clone()));
            }
        }));
    }

    /// Stops listening and drops every connection, as SIGKILL would.
    async fn kill(&mut self) {
        let task = self.task.take().unwrap();
        task.abort();
        let _ = task.await;
    }

    /// The next whole request the server read.
    async fn next_request(&mut self) -> Vec<u8> {
        self.received.recv().await.unwrap()
    }
}

fn bind(addr: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(addr).unwrap();
    socket.listen(64).unwrap()
}

/// Serves one connection's requests until the client closes it.
async fn answer(mut stream: TcpStream, received: mpsc::UnboundedSender<Vec<u8>>) {
    let mut buf = Vec::new();
    while let Some(request) = read_message(&mut stream, &mut buf).await {
        let body = String::from_utf8_lossy(body_of(&request)).into_owned();
        received.send(request).unwrap();
        if stream.write_all(&response(&body)).await.is_err() {
            return;
        }
    }
}

/// Reads one message with a Content-Length body; `None` at the end of the stream.
async fn read_message(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(len) = message_len(buf) {
            return Some(buf.drain(..len).collect());
        }
        let mut chunk = [0; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The length of the whole message at the start of `buf`, once it is all there.
fn message_len(buf: &[u8]) -> Option<usize> {
    let head = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
    let body: usize = text
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |n| n.trim().parse().unwrap());
    (buf.len() >= head + body).then_some(head + body)
}

fn body_of(message: &[u8]) -> &[u8] {
    let head = message.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    &message[head..]
}

fn request(body: &str) -> Vec<u8> {
    format!(
        "POST /v1/notes HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn response(body: &str) -> Vec<u8> {
    let body = format!("done: {body}");
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the client got for one request.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The whole answer.
    Answered(Vec<u8>),
    /// The connection ended first, after these bytes.
    Closed(Vec<u8>),
}

/// Sends one request on `stream` and reads its answer.
async fn send(stream: &mut TcpStream, body: &str) -> Outcome {
    if stream.write_all(&request(body)).await.is_err() {
        return Outcome::Closed(Vec::new());
    }
    let mut got = Vec::new();
    match read_message(stream, &mut got).await {
        Some(answer) => Outcome::Answered(answer),
        None => Outcome::Closed(got),
    }
}

/// Opens a connection and sends one request on it.
async fn send_once(addr: SocketAddr, body: &str) -> Outcome {
    match TcpStream::connect(addr).await {
        Ok(mut stream) => send(&mut stream, body).await,
        Err(_) => Outcome::Closed(Vec::new()),
    }
}

fn answered(body: &str) -> Outcome {
    Outcome::Answered(response(body))
}

fn lost() -> Outcome {
    Outcome::Closed(Vec::new())
}

fn faults(lose_answer: f64, cut_answer: f64, reset_on_accept: f64) -> Faults {
    Faults {
        lose_answer,
        cut_answer,
        reset_on_accept,
        seed: 7,
    }
}

#[tokio::test]
async fn without_faults_it_relays_every_request_on_a_kept_alive_connection() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, Faults::none()).await;
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    for body in ["one", "two", "three"] {
        assert_eq!(send(&mut stream, body).await, answered(body));
        assert_eq!(upstream.next_request().await, request(body));
    }
    let expected = Counts {
        connections: 1,
        requests: 3,
        ..Counts::default()
    };
    assert_eq!(relay.counts(), expected);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn it_loses_an_answer_after_the_server_received_the_whole_request() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, faults(1.0, 0.0, 0.0)).await;
    assert_eq!(send_once(relay.addr(), "pay 10").await, lost());
    assert_eq!(upstream.next_request().await, request("pay 10"));
    let counts = relay.counts();
    assert_eq!(
        (counts.requests, counts.answers_lost, counts.answers_cut),
        (1, 1, 0)
    );
}

#[tokio::test]
async fn it_loses_an_answer_on_a_reused_connection() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, Faults::none()).await;
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    assert_eq!(send(&mut stream, "first").await, answered("first"));
    relay.set_faults(faults(1.0, 0.0, 0.0));
    assert_eq!(send(&mut stream, "second").await, lost());
    assert_eq!(upstream.next_request().await, request("first"));
    assert_eq!(upstream.next_request().await, request("second"));
    let counts = relay.counts();
    assert_eq!(
        (counts.connections, counts.requests, counts.answers_lost),
        (1, 2, 1)
    );
}

#[tokio::test]
async fn it_cuts_an_answer_after_its_first_bytes() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, faults(0.0, 1.0, 0.0)).await;
    let Outcome::Closed(got) = send_once(relay.addr(), "pay 20").await else {
        panic!("the answer was not cut");
    };
    let whole = response("pay 20");
    assert!(!got.is_empty() && got.len() < whole.len(), "{got:?}");
    assert!(whole.starts_with(&got));
    assert_eq!(upstream.next_request().await, request("pay 20"));
    let counts = relay.counts();
    assert_eq!(
        (counts.requests, counts.answers_lost, counts.answers_cut),
        (1, 0, 1)
    );
}

#[tokio::test]
async fn it_resets_a_connection_as_soon_as_it_is_accepted() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, faults(0.0, 0.0, 1.0)).await;
    let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
    let read = stream.read(&mut [0; 16]).await;
    assert_eq!(read.unwrap_err().kind(), ErrorKind::ConnectionReset);
    relay.set_faults(Faults::none());
    assert_eq!(send_once(relay.addr(), "after").await, answered("after"));
    assert_eq!(upstream.next_request().await, request("after"));
    // The reset connection never reached the server.
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
    let counts = relay.counts();
    assert_eq!(
        (counts.connections, counts.resets, counts.requests),
        (2, 1, 1)
    );
}

#[tokio::test]
async fn it_refuses_connections_on_its_address_until_reopened() {
    let upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, Faults::none()).await;
    let addr = relay.addr();
    let mut kept = TcpStream::connect(addr).await.unwrap();
    assert_eq!(send(&mut kept, "before").await, answered("before"));
    relay.refuse().await;
    let refused = TcpStream::connect(addr).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    // A connection accepted before the refusal is left alone.
    assert_eq!(send(&mut kept, "during").await, answered("during"));
    relay.reopen().await;
    assert_eq!(relay.addr(), addr);
    assert_eq!(send_once(addr, "after").await, answered("after"));
    assert_eq!(relay.counts().refusals, 1);
}

#[tokio::test]
async fn a_refusal_for_a_while_ends_by_itself() {
    let upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, Faults::none()).await;
    relay.refuse_for(Duration::from_millis(50)).await;
    let addr = relay.addr();
    idemkey_test_support::wait_until("the relay listens again", 1000, || async move {
        send_once(addr, "again").await == answered("again")
    })
    .await;
    assert_eq!(relay.counts().refusals, 1);
}

#[tokio::test]
async fn with_the_server_down_it_closes_connections_unanswered_and_relays_once_it_is_back() {
    let mut upstream = Upstream::start();
    let relay = LossyRelay::start(upstream.addr, Faults::none()).await;
    let mut kept = TcpStream::connect(relay.addr()).await.unwrap();
    assert_eq!(send(&mut kept, "before").await, answered("before"));
    upstream.kill().await;
    assert_eq!(send(&mut kept, "on the dead connection").await, lost());
    assert_eq!(send_once(relay.addr(), "while down").await, lost());
    assert_eq!(relay.counts().upstream_down, 1);
    upstream.restart();
    assert_eq!(send_once(relay.addr(), "back").await, answered("back"));
    let counts = relay.counts();
    assert_eq!((counts.connections, counts.upstream_down), (3, 1));
    assert_eq!((counts.answers_lost, counts.answers_cut), (0, 0));
}

/// Sends one request on each of `n` new connections: what each got.
async fn campaign(relay: &LossyRelay, n: usize) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for i in 0..n {
        outcomes.push(send_once(relay.addr(), &format!("request {i}")).await);
    }
    outcomes
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults_and_the_counts_add_up() {
    let upstream = Upstream::start();
    let mixed = faults(0.3, 0.3, 0.2);
    let first = LossyRelay::start(upstream.addr, mixed).await;
    let second = LossyRelay::start(upstream.addr, mixed).await;
    let other_seed = LossyRelay::start(upstream.addr, Faults { seed: 8, ..mixed }).await;
    let outcomes = campaign(&first, 40).await;
    assert_eq!(campaign(&second, 40).await, outcomes);
    assert_ne!(campaign(&other_seed, 40).await, outcomes);
    let counts = first.counts();
    assert_eq!(counts, second.counts());
    let whole = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Outcome::Answered(_)))
        .count() as u64;
    let partial = outcomes
        .iter()
        .filter(|outcome| matches!(outcome, Outcome::Closed(got) if !got.is_empty()))
        .count() as u64;
    assert_eq!(counts.connections, 40);
    assert_eq!(counts.resets + counts.requests, 40);
    assert_eq!(
        counts.requests,
        whole + counts.answers_lost + counts.answers_cut
    );
    assert_eq!(counts.answers_cut, partial);
    assert!(
        [
            counts.resets,
            counts.answers_lost,
            counts.answers_cut,
            whole
        ]
        .iter()
        .all(|&n| n > 0),
        "every fate should occur in 40 connections: {counts}"
    );
}
