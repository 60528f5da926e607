//! A storm of identical requests released together: each connection is opened and sent all
//! bytes but the last, then every last byte goes out at once.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

/// One answer: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code, 0 when none could be read.
    pub status: u16,
    /// The body, as text.
    pub body: String,
}

/// A POST /v1/notes as raw HTTP/1.1 bytes.
pub fn raw_create(addr: SocketAddr, secret: &str, key: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/notes HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {secret}\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `request` to each address in `targets` at once and collects the answers.
pub async fn storm(targets: &[SocketAddr], request: impl Fn(SocketAddr) -> Vec<u8>) -> Vec<Answer> {
    let barrier = Arc::new(Barrier::new(targets.len()));
    let tasks: Vec<_> = targets
        .iter()
        .map(|&addr| {
            let (bytes, barrier) = (request(addr), barrier.clone());
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                let (head, last) = bytes.split_at(bytes.len() - 1);
                stream.write_all(head).await.unwrap();
                barrier.wait().await;
                stream.write_all(last).await.unwrap();
                let mut response = Vec::new();
                stream.read_to_end(&mut response).await.unwrap();
                parse(&response)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Status and body of a `Connection: close` response with a Content-Length body.
fn parse(response: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        body: body.to_owned(),
    }
}
