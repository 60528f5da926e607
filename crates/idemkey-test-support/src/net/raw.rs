//! Reading one HTTP/1.1 request off a raw socket, for the hand-written hostile servers of the
//! checker's tests and of `idemkey-bench`'s.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Reads a request head and its `Content-Length` body, so that answering never races unread
/// request bytes (closing with unread input resets the connection); returns the head.
pub async fn read_request(stream: &mut TcpStream) -> io::Result<String> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        read_more(stream, &mut buf).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    while buf.len() < head_end + content_length(&head) {
        read_more(stream, &mut buf).await?;
    }
    Ok(head)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut chunk = [0; 4096];
    match stream.read(&mut chunk).await? {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        n => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The `Content-Length` of a request head, 0 when absent.
fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0)
}
