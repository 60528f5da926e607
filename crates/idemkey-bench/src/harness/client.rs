//! One keep-alive HTTP/1.1 connection per worker, over hyper's connection API: no pool, no
//! extra layers, so the client takes as little CPU from the server it shares the cores with.
//!
//! Every request is bounded by [`Limits`]: the service may be hostile (`--url`), and neither
//! an endless body nor a stalled answer may grow the bench's memory or hang the run.

use std::net::SocketAddr;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::limits::Limits;

/// Where the service is and who the bench is to it.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// The service's address.
    pub(crate) addr: SocketAddr,
    host: HeaderValue,
    /// `Bearer TOKEN`.
    pub(crate) bearer: HeaderValue,
}

impl Target {
    /// A target at `addr` authenticating with the bearer `token`.
    pub(crate) fn new(addr: SocketAddr, token: &str) -> anyhow::Result<Self> {
        Ok(Self {
            addr,
            host: HeaderValue::from_str(&addr.to_string())?,
            bearer: HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the token is not a valid header value")?,
        })
    }
}

/// What the bench needs of a response.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// `Idempotent-Replayed: true` was present.
    pub(crate) replayed: bool,
    pub(crate) body: Bytes,
}

/// A worker's connection; it reconnects after a transport error, a timeout or an oversized
/// body.
pub(crate) struct Conn {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// Opens a connection to `target`, within [`Limits::REQUEST`]'s time.
    pub(crate) async fn open(target: &Target) -> anyhow::Result<Self> {
        let limits = Limits::REQUEST;
        let sender = tokio::time::timeout(limits.time, connect(target.addr))
            .await
            .map_err(|_| limits.timed_out())??;
        Ok(Self {
            target: target.clone(),
            sender: Some(sender),
        })
    }

    /// `POST /v1/notes` with `body`, under `key` if there is one.
    pub(crate) async fn create(
        &mut self,
        key: Option<&str>,
        body: Bytes,
    ) -> anyhow::Result<Answer> {
        let mut request = self.request(Method::POST, "/v1/notes", body);
        let headers = request.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = key {
            headers.insert("idempotency-key", HeaderValue::from_str(key)?);
        }
        self.send(request, Limits::REQUEST).await
    }

    /// `GET path`, within [`Limits::REQUEST`].
    pub(crate) async fn get(&mut self, path: &str) -> anyhow::Result<Answer> {
        self.get_within(path, Limits::REQUEST).await
    }

    /// `GET path`, within `limits`.
    pub(crate) async fn get_within(
        &mut self,
        path: &str,
        limits: Limits,
    ) -> anyhow::Result<Answer> {
        let request = self.request(Method::GET, path, Bytes::new());
        self.send(request, limits).await
    }

    fn request(&self, method: Method, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = path.parse().unwrap_or_default();
        let headers = request.headers_mut();
        headers.insert(HOST, self.target.host.clone());
        headers.insert(AUTHORIZATION, self.target.bearer.clone());
        request
    }

    /// One exchange within `limits`: a timeout or an oversized body is an error like a
    /// transport error.
    async fn send(
        &mut self,
        request: Request<Full<Bytes>>,
        limits: Limits,
    ) -> anyhow::Result<Answer> {
        let result = tokio::time::timeout(limits.time, self.exchange(request, limits))
            .await
            .unwrap_or_else(|_| Err(limits.timed_out()));
        if result.is_err() {
            // The connection may be broken, or mid-answer: dropping its handle (and the answer)
            // makes hyper close it, and the next request opens a new one.
            self.sender = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        request: Request<Full<Bytes>>,
        limits: Limits,
    ) -> anyhow::Result<Answer> {
        let sender = match &mut self.sender {
            Some(sender) => sender,
            None => self.sender.insert(connect(self.target.addr).await?),
        };
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status: parts.status,
            replayed: parts
                .headers
                .get("idempotent-replayed")
                .is_some_and(|v| v.as_bytes() == b"true"),
            body: read_body(body, limits).await?,
        })
    }
}

/// A new connection to `addr`, its driver spawned.
async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream.set_nodelay(true)?;
    // hyper bounds the head itself (a buffer of about 400 KiB, 100 headers).
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The whole body, if it is at most `limits.body` bytes: a larger one is an error as soon as
/// the limit is passed, so the bench never holds more than the limit (twice it, briefly, while
/// the chunks are joined).
async fn read_body(body: Incoming, limits: Limits) -> anyhow::Result<Bytes> {
    match Limited::new(body, limits.body).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(limits.body_too_large()),
        Err(error) => Err(anyhow::anyhow!(error)),
    }
}

/// A create request's body, whose title names the request (so notes can be counted by it).
pub(crate) fn note_body(title: &str) -> Bytes {
    Bytes::from(format!(r#"{{"title":"{title}"}}"#))
}

/// The `id` of a created note.
pub(crate) fn note_id(answer: &Answer) -> anyhow::Result<String> {
    let value: serde_json::Value = serde_json::from_slice(&answer.body)?;
    value["id"]
        .as_str()
        .map(str::to_owned)
        .context("the create response has no id")
}

/// The socket address of an `http://HOST:PORT` URL.
pub(crate) async fn resolve(url: &str) -> anyhow::Result<SocketAddr> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("--url must start with http://, got {url:?}");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let authority = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    tokio::net::lookup_host(&authority)
        .await
        .with_context(|| format!("cannot resolve {authority}"))?
        .next()
        .with_context(|| format!("no address for {authority}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;

    /// How a test server answers the requests of one connection.
    #[derive(Clone, Copy)]
    enum Answers {
        /// A `200` head, then chunks until the client leaves.
        EndlessBody,
        /// A `200` head announcing 100 bytes, one of them, then silence.
        StalledBody,
        /// Nothing at all.
        Silence,
        /// `200` with `{"id":"n1"}`, for every request.
        Fine,
        /// `200` with a body of this many bytes, for every request.
        Sized(usize),
    }

    /// A server whose `n`th connection is answered as `script[n]` (the last one repeats); the
    /// receiver hears of each connection the client has closed.
    async fn server(script: Vec<Answers>) -> (Target, UnboundedReceiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Target::new(listener.local_addr().unwrap(), "t").unwrap();
        let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for n in 0.. {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let answers = script[n.min(script.len() - 1)];
                let closed = closed.clone();
                tokio::spawn(async move {
                    // The client leaving mid-answer ends most connections: not an error here.
                    drop(answer(stream, answers).await);
                    let _ = closed.send(());
                });
            }
        });
        (target, closes)
    }

    /// Whether the server hears within a second that the client closed a connection.
    async fn heard_closed(closes: &mut UnboundedReceiver<()>) -> bool {
        tokio::time::timeout(Duration::from_secs(1), closes.recv())
            .await
            .is_ok_and(|close| close.is_some())
    }

    async fn answer(mut stream: TcpStream, answers: Answers) -> std::io::Result<()> {
        let mut buf = vec![0; 4096];
        loop {
            // Test requests are GETs: one read holds the whole head.
            if stream.read(&mut buf).await? == 0 {
                return Ok(());
            }
            let head = match answers {
                Answers::EndlessBody => "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                Answers::StalledBody => "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{",
                Answers::Silence => "",
                Answers::Fine => "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"id\":\"n1\"}",
                Answers::Sized(n) => &format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n{}",
                    "x".repeat(n)
                ),
            };
            stream.write_all(head.as_bytes()).await?;
            if let Answers::EndlessBody = answers {
                let chunk = format!("4000\r\n{}\r\n", " ".repeat(0x4000));
                loop {
                    stream.write_all(chunk.as_bytes()).await?;
                }
            }
        }
    }

    /// Limits small enough for a test: 64 KiB, half a second.
    const SMALL: Limits = Limits {
        time: Duration::from_millis(500),
        body: 64 * 1024,
    };

    async fn get(conn: &mut Conn) -> anyhow::Result<Answer> {
        conn.get_within("/v1/notes/n1", SMALL).await
    }

    /// A connection to a new server answering as `script` says, and its closes.
    async fn open(script: Vec<Answers>) -> (Conn, UnboundedReceiver<()>) {
        let (target, closes) = server(script).await;
        (Conn::open(&target).await.unwrap(), closes)
    }

    #[tokio::test]
    async fn an_endless_body_fails_at_the_limit_and_its_connection_is_closed() {
        let (mut conn, mut closes) = open(vec![Answers::EndlessBody]).await;
        let error = get(&mut conn).await.unwrap_err().to_string();
        assert_eq!(error, SMALL.body_too_large().to_string());
        assert!(
            heard_closed(&mut closes).await,
            "the connection mid-body is closed"
        );
    }

    #[tokio::test]
    async fn a_stalled_head_or_body_times_out_and_its_connection_is_closed() {
        for script in [Answers::Silence, Answers::StalledBody] {
            let (mut conn, mut closes) = open(vec![script]).await;
            let error = get(&mut conn).await.unwrap_err().to_string();
            assert_eq!(error, SMALL.timed_out().to_string());
            assert!(
                heard_closed(&mut closes).await,
                "the stalled connection is closed"
            );
        }
    }

    #[tokio::test]
    async fn the_next_request_after_a_failure_gets_a_new_connection() {
        let script = vec![Answers::StalledBody, Answers::EndlessBody, Answers::Fine];
        let (mut conn, _closes) = open(script).await;
        assert!(get(&mut conn).await.is_err());
        assert!(get(&mut conn).await.is_err());
        for _ in 0..2 {
            let answer = get(&mut conn).await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            assert_eq!(note_id(&answer).unwrap(), "n1");
        }
    }

    #[tokio::test]
    async fn a_body_at_the_limit_is_read_whole_and_one_byte_more_is_an_error() {
        let (mut conn, _closes) = open(vec![Answers::Sized(SMALL.body)]).await;
        assert_eq!(get(&mut conn).await.unwrap().body.len(), SMALL.body);
        let (mut conn, _closes) = open(vec![Answers::Sized(SMALL.body + 1)]).await;
        let error = get(&mut conn).await.unwrap_err().to_string();
        assert_eq!(error, SMALL.body_too_large().to_string());
    }
}
