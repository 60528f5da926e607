//! HTTP/1.1 written by hand over a `TcpStream`, for what an ordinary client cannot do: send a
//! request and close without reading, hold back the last byte of many requests, or send header
//! bytes a client library refuses.

mod response;

use std::{io, time::Duration};

use http::HeaderMap;
use tokio::{
    io::AsyncWriteExt,
    net::TcpStream,
    time::{error::Elapsed, timeout},
};
use url::Url;

pub(crate) use response::read_response;

use crate::exchange::Exchange;

/// Where and how to address one URL over a raw connection.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `host:port` to dial.
    pub(crate) addr: String,
    host: String,
    path: String,
}

impl Target {
    /// The target of an `http://` URL (port 80 unless given).
    pub(crate) fn new(url: &Url) -> Self {
        let host = url.host_str().unwrap_or("localhost");
        let port = url.port_or_known_default().unwrap_or(80);
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let host_header = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Self {
            addr: format!("{host}:{port}"),
            host: host_header,
            path,
        }
    }

    /// The bytes of a `POST` with `headers`, an optional raw key and a JSON body.
    pub(crate) fn post(&self, headers: &HeaderMap, key: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
        let mut out =
            format!("POST {} HTTP/1.1\r\nHost: {}\r\n", self.path, self.host).into_bytes();
        for (name, value) in headers {
            push_header(&mut out, name.as_str().as_bytes(), value.as_bytes());
        }
        if !headers.contains_key(http::header::CONTENT_TYPE) {
            push_header(&mut out, b"content-type", b"application/json");
        }
        if let Some(key) = key {
            push_header(&mut out, b"idempotency-key", key);
        }
        push_header(
            &mut out,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
        push_header(&mut out, b"connection", b"close");
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out
    }
}

fn push_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Dials `addr` within `limit`.
pub(crate) async fn connect(addr: &str, limit: Duration) -> io::Result<TcpStream> {
    timeout(limit, TcpStream::connect(addr))
        .await
        .map_err(timed_out)?
}

/// Sends `request` on a new connection and reads the response, all within `limit`.
pub(crate) async fn exchange(addr: &str, request: &[u8], limit: Duration) -> io::Result<Exchange> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        read_response(&mut stream).await
    };
    timeout(limit, attempt).await.map_err(timed_out)?
}

/// When a client that will never read its response hangs up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HangUp {
    /// Right after the last byte of the request is written.
    AtOnce,
    /// As soon as the response starts to arrive, leaving it unread.
    Unread,
}

/// Sends `request` on a new connection and closes it as `hang_up` says, never reading the
/// response; all within `limit`.
pub(crate) async fn send_and_abandon(
    addr: &str,
    request: &[u8],
    hang_up: HangUp,
    limit: Duration,
) -> io::Result<()> {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        match hang_up {
            HangUp::AtOnce => stream.shutdown().await,
            HangUp::Unread => stream.readable().await,
        }
    };
    timeout(limit, attempt).await.map_err(timed_out)?
}

/// The error for an operation that ran out of time.
pub(crate) fn timed_out(_: Elapsed) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn post_writes_a_complete_request() {
        let url = Url::parse("http://127.0.0.1:8080/v1/notes?x=1").unwrap();
        let target = Target::new(&url);
        assert_eq!(target.addr, "127.0.0.1:8080");
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer s"));
        let bytes = target.post(&headers, Some(b"k\x01"), b"{}");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("POST /v1/notes?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"));
        assert!(text.contains("authorization: Bearer s\r\n"));
        assert!(text.contains("content-type: application/json\r\n"));
        assert!(text.contains("idempotency-key: k\x01\r\n"));
        assert!(text.ends_with("content-length: 2\r\nconnection: close\r\n\r\n{}"));
    }

    #[test]
    fn default_port_is_80() {
        let target = Target::new(&Url::parse("http://localhost/").unwrap());
        assert_eq!(target.addr, "localhost:80");
        assert!(
            String::from_utf8(target.post(&HeaderMap::new(), None, b""))
                .unwrap()
                .contains("Host: localhost\r\n")
        );
    }
}
