//! A small HTTP/1.1 response reader: head by `httparse`, body by `Content-Length`, chunked
//! transfer coding, or the end of the connection.

use std::io;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{MAX_BODY_BYTES, exchange::Exchange, limits::body_too_large};

/// Longest response head accepted, and the bound on a chunk-size line and on the trailer
/// section: far above anything a real server sends, low enough that a server sending header
/// bytes forever is cut off early.
const MAX_HEAD: usize = 64 * 1024;
/// Most interim (1xx) responses skipped before the final one. Real servers send one or two;
/// without a bound a server could keep the reader skipping them until the timeout.
const MAX_INTERIM: usize = 16;
/// The line ending of HTTP/1.1.
const CRLF: &[u8] = b"\r\n";

/// Reads one response from `reader`, skipping interim (1xx) responses. Bodies past
/// [`MAX_BODY_BYTES`] and malformed responses are errors.
pub(crate) async fn read_response<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Exchange> {
    let mut buf = Vec::new();
    for _ in 0..=MAX_INTERIM {
        let (status, headers) = read_head(reader, &mut buf).await?;
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let body = read_body(reader, &mut buf, status, &headers).await?;
        return Ok(Exchange {
            status,
            headers,
            body,
        });
    }
    Err(invalid("too many interim (1xx) responses"))
}

async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<(u16, HeaderMap)> {
    loop {
        if let Some((status, headers, len)) = parse_head(buf)? {
            buf.drain(..len);
            return Ok((status, headers));
        }
        if buf.len() > MAX_HEAD {
            return Err(invalid("response head too large"));
        }
        if fill(reader, buf).await? == 0 {
            return Err(eof("the connection closed before a response"));
        }
    }
}

fn parse_head(buf: &[u8]) -> io::Result<Option<(u16, HeaderMap, usize)>> {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut slots);
    let len = match response.parse(buf).map_err(|e| invalid(&e.to_string()))? {
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(len) => len,
    };
    let mut headers = HeaderMap::new();
    for header in response.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes());
        let value = HeaderValue::from_bytes(header.value);
        if let (Ok(name), Ok(value)) = (name, value) {
            headers.append(name, value);
        }
    }
    Ok(Some((response.code.unwrap_or(0), headers, len)))
}

async fn read_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    status: u16,
    headers: &HeaderMap,
) -> io::Result<Vec<u8>> {
    if status == 204 || status == 304 {
        return Ok(Vec::new());
    }
    if is_chunked(headers) {
        return read_chunked(reader, buf).await;
    }
    match content_length(headers)? {
        Some(len) => {
            fill_to(reader, buf, len).await?;
            buf.truncate(len);
        }
        None => read_to_close(reader, buf).await?,
    }
    Ok(std::mem::take(buf))
}

/// Reads until the server closes the connection, stopping with an error once `buf` holds more
/// than [`MAX_BODY_BYTES`] (a server may stream forever).
async fn read_to_close<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<()> {
    while fill(reader, buf).await? > 0 {
        if buf.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
    }
    Ok(())
}

async fn read_chunked<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size = chunk_size(&read_line(reader, buf).await?)?;
        if size == 0 {
            skip_trailers(reader, buf).await?;
            return Ok(body);
        }
        // Checked even though both terms are within the limit: sizes are the server's word.
        let total = body.len().checked_add(size);
        if total.is_none_or(|total| total > MAX_BODY_BYTES) {
            return Err(too_large());
        }
        read_chunk_data(reader, buf, size, &mut body).await?;
    }
}

/// The size on a chunk-size line (`1a;name=value`): hexadecimal digits only, as RFC 9112
/// §7.1 has it (`from_str_radix` alone would also take a sign), and at most
/// [`MAX_BODY_BYTES`].
fn chunk_size(line: &str) -> io::Result<usize> {
    let digits = line.split(';').next().unwrap_or("").trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid("bad chunk size"));
    }
    // With the digits checked, parsing fails only when the size overflows `usize`.
    match usize::from_str_radix(digits, 16) {
        Ok(size) if size <= MAX_BODY_BYTES => Ok(size),
        _ => Err(invalid(&format!(
            "chunk size exceeds the {} MiB body limit",
            MAX_BODY_BYTES / (1024 * 1024)
        ))),
    }
}

/// Moves one chunk of `size` bytes, and the CRLF after it, from the connection into `body`.
async fn read_chunk_data<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    size: usize,
    body: &mut Vec<u8>,
) -> io::Result<()> {
    let end = size.checked_add(CRLF.len()).ok_or_else(too_large)?;
    fill_to(reader, buf, end).await?;
    if &buf[size..end] != CRLF {
        return Err(invalid("chunk not followed by CRLF"));
    }
    body.extend_from_slice(&buf[..size]);
    buf.drain(..end);
    Ok(())
}

/// Skips the trailer fields after the last chunk, up to the empty line; the section as a whole
/// is bounded like a head, since a server could send trailer lines forever.
async fn skip_trailers<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<()> {
    let mut seen: usize = 0;
    loop {
        let line = read_line(reader, buf).await?;
        if line.is_empty() {
            return Ok(());
        }
        seen = seen.saturating_add(line.len() + CRLF.len());
        if seen > MAX_HEAD {
            return Err(invalid("trailer section too large"));
        }
    }
}

async fn read_line<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<String> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == CRLF) {
            let line = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + CRLF.len());
            return Ok(line);
        }
        if buf.len() > MAX_HEAD {
            return Err(invalid("chunk line too long"));
        }
        if fill(reader, buf).await? == 0 {
            return Err(eof("the connection closed inside a chunked body"));
        }
    }
}

fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("chunked"))
}

fn content_length(headers: &HeaderMap) -> io::Result<Option<usize>> {
    let Some(value) = headers.get(http::header::CONTENT_LENGTH) else {
        return Ok(None);
    };
    let len = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or_else(|| invalid("bad Content-Length"))?;
    if len > MAX_BODY_BYTES {
        return Err(too_large());
    }
    Ok(Some(len))
}

/// Reads until `buf` holds at least `len` bytes; callers keep `len` within the body limit.
async fn fill_to<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    len: usize,
) -> io::Result<()> {
    while buf.len() < len {
        if fill(reader, buf).await? == 0 {
            return Err(eof("the connection closed inside the body"));
        }
    }
    Ok(())
}

/// Appends one read (at most 8 KiB) to `buf`; 0 at the end of the stream.
async fn fill<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; 8192];
    let n = reader.read(&mut chunk).await?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

fn invalid(reason: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed response: {reason}"),
    )
}

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, body_too_large())
}

fn eof(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, reason.to_owned())
}

#[cfg(test)]
mod tests {
    use std::{
        pin::Pin,
        task::{Context, Poll},
    };

    use tokio::io::ReadBuf;

    use super::*;

    async fn parse(bytes: &[u8]) -> io::Result<Exchange> {
        let mut reader = bytes;
        read_response(&mut reader).await
    }

    /// A server that never stops: `pattern`, again and again.
    struct Cycle {
        pattern: Vec<u8>,
        at: usize,
    }

    impl AsyncRead for Cycle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            while out.remaining() > 0 {
                let rest = &self.pattern[self.at..];
                let n = rest.len().min(out.remaining());
                out.put_slice(&rest[..n]);
                self.at = (self.at + n) % self.pattern.len();
            }
            Poll::Ready(Ok(()))
        }
    }

    /// The error from reading `head`, then `pattern` forever.
    async fn endless(head: &'static [u8], pattern: impl Into<Vec<u8>>) -> String {
        let pattern = pattern.into();
        let mut reader = head.chain(Cycle { pattern, at: 0 });
        let error = read_response(&mut reader).await.expect_err("must stop");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        error.to_string()
    }

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";

    #[tokio::test]
    async fn chunk_sizes_past_the_limit_are_errors_not_panics() {
        for size in [
            "ffffffffffffffff",
            "fffffffffffffffff0",
            "1000001",
            &format!("{:x}", MAX_BODY_BYTES + 1),
        ] {
            // With a chunk before it too: the old check overflowed only on a non-empty body.
            for before in ["", "1\r\na\r\n"] {
                let raw = format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{before}{size}\r\nabc"
                );
                let error = parse(raw.as_bytes()).await.expect_err(size);
                assert_eq!(
                    error.to_string(),
                    "malformed response: chunk size exceeds the 16 MiB body limit"
                );
            }
        }
    }

    #[tokio::test]
    async fn chunk_sizes_are_hex_digits_only() {
        for size in ["+5", "-1", "", " ", "0x5", "5 5"] {
            let raw = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nhello\r\n0\r\n\r\n"
            );
            let error = parse(raw.as_bytes()).await.expect_err(size);
            assert!(
                error.to_string().contains("bad chunk size"),
                "{size:?}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn endless_bodies_stop_at_the_limit() {
        let until_close = endless(b"HTTP/1.1 200 OK\r\n\r\n", b"x").await;
        assert_eq!(until_close, body_too_large());
        // 1 KiB chunks: tiny ones take the reader (draining its buffer per chunk) seconds.
        let chunk = [&b"400\r\n"[..], &[b'a'; 0x400], b"\r\n"].concat();
        let chunks = endless(CHUNKED, chunk).await;
        assert_eq!(chunks, body_too_large());
        // 16 MiB + 1: refused before a byte of it is read.
        let exact = endless(b"HTTP/1.1 200 OK\r\nContent-Length: 16777217\r\n\r\n", b"x").await;
        assert_eq!(exact, body_too_large());
    }

    #[tokio::test]
    async fn a_body_at_the_limit_is_read() {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {MAX_BODY_BYTES}\r\n\r\n");
        let body = vec![b'x'; MAX_BODY_BYTES];
        let raw = [head.as_bytes(), &body].concat();
        assert_eq!(parse(&raw).await.unwrap().body.len(), MAX_BODY_BYTES);
    }

    #[tokio::test]
    async fn endless_heads_trailers_and_interim_responses_stop() {
        let head = endless(b"HTTP/1.1 200 OK\r\nX-A: ", b"b").await;
        assert!(head.contains("response head too large"), "{head}");
        let headers = endless(b"HTTP/1.1 200 OK\r\n", b"X-A: b\r\n").await;
        assert!(headers.contains("too many headers"), "{headers}");
        let trailers = endless(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
            b"T: v\r\n",
        )
        .await;
        assert!(trailers.contains("trailer section too large"), "{trailers}");
        let interim = endless(b"", b"HTTP/1.1 100 Continue\r\n\r\n").await;
        assert!(interim.contains("interim"), "{interim}");
    }

    #[tokio::test]
    async fn content_length_body() {
        let ex =
            parse(b"HTTP/1.1 201 Created\r\nLocation: /n/1\r\nContent-Length: 4\r\n\r\nabcdEXTRA")
                .await
                .unwrap();
        assert_eq!((ex.status, ex.body.as_slice()), (201, &b"abcd"[..]));
        assert_eq!(ex.header("location"), Some("/n/1"));
    }

    #[tokio::test]
    async fn chunked_body_with_extension_and_trailer() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n";
        let ex = parse(raw).await.unwrap();
        assert_eq!(ex.body, b"abc0123456789");
    }

    #[tokio::test]
    async fn body_until_close_and_interim_responses() {
        let ex = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nhello")
            .await
            .unwrap();
        assert_eq!((ex.status, ex.body.as_slice()), (200, &b"hello"[..]));
        let empty = parse(b"HTTP/1.1 204 No Content\r\n\r\n").await.unwrap();
        assert!(empty.body.is_empty());
    }

    #[tokio::test]
    async fn truncated_or_malformed_responses_are_errors() {
        assert!(parse(b"").await.is_err());
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc")
                .await
                .is_err()
        );
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .await
                .is_err()
        );
        assert!(parse(b"NOT HTTP\r\n\r\n").await.is_err());
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
                .await
                .is_err()
        );
    }
}
