//! Final answers are handed on as their head arrives: a stream of server-sent events reaches
//! the caller event by event, and the policy's time limit stops counting at the head.
//!
//! The server sends its next event only when the test says so, after the caller has read the
//! previous one: a middleware that held the answer back would hold the test up, never pass it.

use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::support::{client, fast, read_request};

/// A server that answers one request with a chunked body of content type `content_type`:
/// its head and first chunk at once, each later chunk when `next` gets a message, and the
/// end when `next` closes.
async fn streaming_server(content_type: &'static str) -> (String, mpsc::Sender<&'static str>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/stream", listener.local_addr().unwrap());
    let (next, mut chunks) = mpsc::channel::<&'static str>(1);
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut stream = BufReader::new(stream);
        read_request(&mut stream).await.unwrap();
        let stream = stream.get_mut();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&chunk("data: 1\n\n")).await.unwrap();
        while let Some(data) = chunks.recv().await {
            stream.write_all(&chunk(data)).await.unwrap();
        }
        stream.write_all(b"0\r\n\r\n").await.unwrap();
    });
    (url, next)
}

fn chunk(data: &str) -> Vec<u8> {
    format!("{:x}\r\n{data}\r\n", data.len()).into_bytes()
}

/// Long enough to mean "held back", never reached by a middleware that streams.
const HELD_BACK: Duration = Duration::from_secs(30);

async fn next_chunk(response: &mut reqwest::Response) -> Option<bytes::Bytes> {
    tokio::time::timeout(HELD_BACK, response.chunk())
        .await
        .expect("the event was held back")
        .unwrap()
}

#[tokio::test]
async fn an_event_stream_reaches_the_caller_event_by_event_past_the_time_limit() {
    for content_type in ["text/event-stream", "application/json"] {
        let (url, next) = streaming_server(content_type).await;
        let limit = Duration::from_millis(300);
        let client = client(fast().max_elapsed(limit).attempt_timeout(limit));

        let send = client.post(url).body("{}").send();
        let mut response = tokio::time::timeout(HELD_BACK, send)
            .await
            .expect("the answer's head was held back")
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(next_chunk(&mut response).await.unwrap(), "data: 1\n\n");

        // Past the policy's time limits, the request's and the attempt's, the stream goes on.
        tokio::time::sleep(limit * 2).await;
        next.send("data: 2\n\n").await.unwrap();
        assert_eq!(next_chunk(&mut response).await.unwrap(), "data: 2\n\n");
        drop(next);
        assert_eq!(next_chunk(&mut response).await, None, "{content_type}");
    }
}
