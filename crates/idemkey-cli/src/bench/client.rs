//! One keep-alive HTTP/1.1 connection per worker, over hyper's connection API: no pool, no
//! extra layers, so the client takes as little CPU from the server it shares the cores with.

use std::net::SocketAddr;

use anyhow::Context;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where the service is and who the bench is to it.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    /// The service's address.
    pub(crate) addr: SocketAddr,
    host: HeaderValue,
    bearer: HeaderValue,
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

/// A worker's connection; it reconnects after a transport error.
pub(crate) struct Conn {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    /// Opens a connection to `target`.
    pub(crate) async fn open(target: &Target) -> anyhow::Result<Self> {
        let mut conn = Self {
            target: target.clone(),
            sender: None,
        };
        conn.sender = Some(conn.connect().await?);
        Ok(conn)
    }

    async fn connect(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(self.target.addr)
            .await
            .with_context(|| format!("cannot connect to {}", self.target.addr))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(sender)
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
        self.send(request).await
    }

    /// `GET path`.
    pub(crate) async fn get(&mut self, path: &str) -> anyhow::Result<Answer> {
        let request = self.request(Method::GET, path, Bytes::new());
        self.send(request).await
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

    async fn send(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
        let result = self.exchange(request).await;
        if result.is_err() {
            // The connection may be broken: the next request opens a new one.
            self.sender = None;
        }
        result
    }

    async fn exchange(&mut self, request: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
        let sender = match &mut self.sender {
            Some(sender) => sender,
            None => self.sender.insert(self.connect().await?),
        };
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Answer {
            status: parts.status,
            replayed: parts
                .headers
                .get("idempotent-replayed")
                .is_some_and(|v| v.as_bytes() == b"true"),
            body,
        })
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
