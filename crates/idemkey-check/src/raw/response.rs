//! A small HTTP/1.1 response reader: head by `httparse`, body by `Content-Length`, chunked
//! transfer coding, or the end of the connection.

use std::io;

use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::exchange::Exchange;

/// Longest response head (and chunk-size line) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Largest response body accepted.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// Reads one response from `reader`, skipping interim (1xx) responses.
pub(crate) async fn read_response<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Exchange> {
    let mut buf = Vec::new();
    loop {
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
        None => while buf.len() <= MAX_BODY && fill(reader, buf).await? > 0 {},
    }
    if buf.len() > MAX_BODY {
        return Err(invalid("response body too large"));
    }
    Ok(std::mem::take(buf))
}

async fn read_chunked<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader, buf).await?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| invalid("bad chunk size"))?;
        if size == 0 {
            // Trailer fields, up to the empty line.
            while !read_line(reader, buf).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("response body too large"));
        }
        fill_to(reader, buf, size + 2).await?;
        if &buf[size..size + 2] != b"\r\n" {
            return Err(invalid("chunk not followed by CRLF"));
        }
        body.extend_from_slice(&buf[..size]);
        buf.drain(..size + 2);
    }
}

async fn read_line<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut Vec<u8>) -> io::Result<String> {
    loop {
        if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
            let line = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 2);
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
    if len > MAX_BODY {
        return Err(invalid("response body too large"));
    }
    Ok(Some(len))
}

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

fn eof(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, reason.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parse(bytes: &[u8]) -> io::Result<Exchange> {
        let mut reader = bytes;
        read_response(&mut reader).await
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
