//! A scripted HTTP/1.1 server on a real socket, and the client the tests drive through it.
//!
//! The server records every request it reads (an *attempt*) and answers it by the script's
//! entry for that attempt's number: a whole answer, nothing at all, part of an answer, or an
//! answer later than the client waits. The script is the server's, not a connection's, so a
//! client's retry on a new connection gets the next entry.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use http::{Extensions, StatusCode};
use idemkey_reqwest::{IdempotencyMiddleware, Policy};
use reqwest::{Request, Response};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The problem types' base, as idemkey's servers name them.
pub(crate) const PROBLEMS: &str = "https://docs.rs/idemkey/latest/idemkey/problems/index.html#";

/// How the server answers one attempt.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// These bytes, a whole answer; the connection stays open for the next request.
    Answer(Vec<u8>),
    /// Close the connection without a byte.
    Drop,
    /// These bytes (an answer's head and part of its body), then close.
    CutOff(Vec<u8>),
    /// Wait this long (past the client's timeout), then these bytes, then close.
    Late(Duration, Vec<u8>),
}

/// The reply to attempt `n` (0 for the first).
type Script = dyn Fn(usize) -> Reply + Send + Sync;

/// One request as the server read it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// When the request's last byte arrived.
    pub(crate) at: Instant,
    pub(crate) method: String,
    pub(crate) path: String,
    /// The `Idempotency-Key` header, as sent.
    pub(crate) key: Option<String>,
    pub(crate) body: Vec<u8>,
}

/// The scripted server; its tasks end with the test's runtime.
pub(crate) struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    /// A server on a free port answering attempt `n` with `replies[n]`, the last reply for
    /// every attempt after.
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, replies_script(replies))
    }

    /// A server answering attempt `n` with `script(n)`.
    pub(crate) async fn scripted(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(script))
    }

    /// A server on `port`, which must be free again (see [`free_port`]).
    pub(crate) fn start_on(port: u16, replies: Vec<Reply>) -> Self {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let listener = TcpListener::from_std(listener).unwrap();
        Self::serve(listener, replies_script(replies))
    }

    fn serve(listener: TcpListener, script: Arc<Script>) -> Self {
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorder = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(
                    stream,
                    Arc::clone(&recorder),
                    Arc::clone(&script),
                ));
            }
        });
        Self { port, seen }
    }

    /// The URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        url(self.port, path)
    }

    /// The attempts the server has read so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The keys of the attempts so far, as sent.
    pub(crate) fn keys(&self) -> Vec<Option<String>> {
        self.seen().into_iter().map(|seen| seen.key).collect()
    }
}

fn replies_script(replies: Vec<Reply>) -> Arc<Script> {
    assert!(!replies.is_empty(), "a script needs a reply");
    Arc::new(move |n| replies[n.min(replies.len() - 1)].clone())
}

/// The URL of `path` on 127.0.0.1's `port`.
pub(crate) fn url(port: u16, path: &str) -> String {
    format!("http://127.0.0.1:{port}{path}")
}

/// A port that had a listener a moment ago and has none now: a connection to it is refused
/// until [`Server::start_on`] binds it again.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Serves one connection's requests, in order, until the script closes it or the client does.
async fn connection(stream: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, script: Arc<Script>) {
    let mut stream = BufReader::new(stream);
    while let Some(request) = read_request(&mut stream).await {
        let attempt = {
            let mut seen = seen.lock().unwrap();
            seen.push(request);
            seen.len() - 1
        };
        match script(attempt) {
            Reply::Answer(bytes) => {
                if stream.get_mut().write_all(&bytes).await.is_err() {
                    return;
                }
            }
            Reply::Drop => return,
            Reply::CutOff(bytes) => {
                let _ = stream.get_mut().write_all(&bytes).await;
                return;
            }
            Reply::Late(wait, bytes) => {
                tokio::time::sleep(wait).await;
                let _ = stream.get_mut().write_all(&bytes).await;
                return;
            }
        }
    }
}

/// One request: its head up to the empty line, then its body (`Content-Length` or chunked);
/// `None` when the connection ends first.
pub(crate) async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Seen> {
    let request_line = read_line(stream).await?;
    let mut parts = request_line.split(' ');
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let (mut key, mut length, mut chunked) = (None, 0, false);
    loop {
        let line = read_line(stream).await?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "idempotency-key" => key = Some(value.to_owned()),
            "content-length" => length = value.parse().ok()?,
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(stream).await?
    } else {
        read_exact(stream, length).await?
    };
    Some(Seen {
        at: Instant::now(),
        method,
        path,
        key,
        body,
    })
}

/// A line without its CRLF; `None` at the end of the stream.
async fn read_line(stream: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    if stream.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    Some(line.trim_end_matches(['\r', '\n']).to_owned())
}

async fn read_exact(stream: &mut BufReader<TcpStream>, length: usize) -> Option<Vec<u8>> {
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(body)
}

/// A chunked body, decoded (a stream body arrives so).
async fn read_chunked(stream: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let size_line = read_line(stream).await?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            // Trailers, if any, up to the empty line.
            while !read_line(stream).await?.is_empty() {}
            return Some(body);
        }
        body.extend(read_exact(stream, size).await?);
        read_line(stream).await?;
    }
}

/// A whole answer: `status`, `headers`, and `body` with its `Content-Length`.
pub(crate) fn answer(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut bytes = head(status, headers, body.len());
    bytes.extend_from_slice(body);
    bytes
}

/// A whole answer with no header of its own and an empty body.
pub(crate) fn status(status: u16) -> Reply {
    Reply::Answer(answer(status, &[], b""))
}

/// A problem+json answer of idemkey's problem `slug`.
pub(crate) fn problem(status: u16, slug: &str) -> Reply {
    let body = format!(r#"{{"type":"{PROBLEMS}{slug}","title":"{slug}","status":{status}}}"#);
    let headers = [("content-type", "application/problem+json")];
    Reply::Answer(answer(status, &headers, body.as_bytes()))
}

/// A 201 whose body is `created`.
pub(crate) fn created() -> Reply {
    Reply::Answer(answer(201, &[], b"created"))
}

/// An answer's head, saying its body has `length` bytes.
pub(crate) fn head(status: u16, headers: &[(&str, &str)], length: usize) -> Vec<u8> {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("Whatever");
    let mut text = format!("HTTP/1.1 {status} {reason}\r\ncontent-length: {length}\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// An HTTP-date `ahead` of now, as a server writes `Retry-After` (whole seconds, rounded
/// down).
pub(crate) fn http_date_in(ahead: Duration) -> String {
    httpdate::fmt_http_date(SystemTime::now() + ahead)
}

/// A policy whose backoff is short, so that a test with retries is quick, declaring that the
/// test's servers (every port of 127.0.0.1) honour keys.
pub(crate) fn fast() -> Policy {
    undeclared().honoured_where(|url| url.host_str() == Some("127.0.0.1"))
}

/// [`fast`], declaring no server.
pub(crate) fn undeclared() -> Policy {
    Policy::default()
        .initial_backoff(Duration::from_millis(1))
        .max_backoff(Duration::from_millis(5))
}

/// A client with the middleware of `policy`.
pub(crate) fn client(policy: Policy) -> ClientWithMiddleware {
    client_with(reqwest::Client::builder(), policy, None)
}

/// A client with the middleware of `policy` on `builder`'s reqwest client, and `inner`, if
/// any, between the middleware and the network: it sees each attempt.
pub(crate) fn client_with(
    builder: reqwest::ClientBuilder,
    policy: Policy,
    inner: Option<BeforeEachAttempt>,
) -> ClientWithMiddleware {
    // A proxy from the environment would stand between the test and its server; the
    // middleware follows redirects itself.
    let reqwest = builder
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let builder =
        reqwest_middleware::ClientBuilder::new(reqwest).with(IdempotencyMiddleware::new(policy));
    match inner {
        Some(inner) => builder.with(inner).build(),
        None => builder.build(),
    }
}

/// A middleware inside the idempotency middleware that calls its hook with each attempt's
/// number (1 for the first) before the attempt goes out: a test changes the world between
/// attempts at a known point, not after a guessed delay.
pub(crate) struct BeforeEachAttempt {
    attempts: Mutex<u32>,
    hook: Box<dyn Fn(u32) + Send + Sync>,
}

impl BeforeEachAttempt {
    pub(crate) fn new(hook: impl Fn(u32) + Send + Sync + 'static) -> Self {
        Self {
            attempts: Mutex::new(0),
            hook: Box::new(hook),
        }
    }
}

#[async_trait::async_trait]
impl Middleware for BeforeEachAttempt {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            *attempts += 1;
            *attempts
        };
        (self.hook)(attempt);
        next.run(request, extensions).await
    }
}

/// The middleware's own error inside `error`, which must be one.
pub(crate) fn own_error(error: &reqwest_middleware::Error) -> &idemkey_reqwest::Error {
    match error {
        reqwest_middleware::Error::Middleware(inner) => inner
            .downcast_ref::<idemkey_reqwest::Error>()
            .unwrap_or_else(|| panic!("not the middleware's error: {inner:?}")),
        reqwest_middleware::Error::Reqwest(inner) => {
            panic!("a reqwest error, not the middleware's: {inner:?}")
        }
    }
}

/// The key in its quoted (sf-string) form, as a generated key is sent, unquoted; panics on
/// any other form.
pub(crate) fn unquoted(sent: &str) -> &str {
    sent.strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or_else(|| panic!("not in the quoted form: {sent:?}"))
}
