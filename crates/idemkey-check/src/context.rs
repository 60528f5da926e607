//! [`Ctx`]: what every case shares — the configuration, an HTTP client and request helpers.

use std::{error::Error as StdError, fmt, io, time::Duration};

use http::{HeaderMap, header::CONTENT_TYPE};

use crate::{
    CheckConfig, Error, MAX_BODY_BYTES, Result,
    exchange::Exchange,
    limits::body_too_large,
    raw::{self, Target},
    resources::{self, Ids},
};

/// How often, at most, a request answered 409 (in flight) is retried.
const SETTLE_ATTEMPTS: u32 = 20;
/// Longest wait between two such retries.
const SETTLE_MAX_WAIT: Duration = Duration::from_secs(1);

/// Which credentials a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Actor {
    /// The `--header` actor.
    First,
    /// The `--actor2-header` actor.
    Second,
}

/// A request that produced no HTTP response (connection error, timeout, malformed answer).
#[derive(Debug)]
pub(crate) struct RequestError(pub(crate) String);

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<reqwest::Error> for RequestError {
    fn from(error: reqwest::Error) -> Self {
        Self(chain(&error))
    }
}

impl From<io::Error> for RequestError {
    fn from(error: io::Error) -> Self {
        Self(chain(&error))
    }
}

/// An error and its sources on one line.
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The shared state of a check run.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) config: CheckConfig,
    pub(crate) target: Target,
    client: reqwest::Client,
    no_headers: HeaderMap,
}

impl Ctx {
    /// Validates `config` and builds the client.
    pub(crate) fn new(config: CheckConfig) -> Result<Self> {
        config.validate()?;
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .map_err(Error::Client)?;
        let target = Target::new(&config.create_url);
        Ok(Self {
            config,
            target,
            client,
            no_headers: HeaderMap::new(),
        })
    }

    /// A new random key, so that runs and cases never share one.
    pub(crate) fn fresh_key(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }

    /// Fails with [`Error::Connect`] when the create endpoint's host does not accept connections.
    pub(crate) async fn preflight(&self) -> Result<()> {
        let addr = &self.target.addr;
        let stream = raw::connect(addr, self.config.timeout).await;
        stream.map(drop).map_err(|source| Error::Connect {
            addr: addr.clone(),
            source,
        })
    }

    pub(crate) fn headers(&self, actor: Actor) -> &HeaderMap {
        match (actor, &self.config.actor2_headers) {
            (Actor::First, _) => &self.config.headers,
            (Actor::Second, Some(headers)) => headers,
            (Actor::Second, None) => &self.no_headers,
        }
    }

    /// `POST`s `body` to the create endpoint as `actor`, with `key` when given.
    pub(crate) async fn create(
        &self,
        actor: Actor,
        key: Option<&str>,
        body: &str,
    ) -> Result<Exchange, RequestError> {
        let headers = self.headers(actor);
        let mut request = self
            .client
            .post(self.config.create_url.clone())
            .headers(headers.clone());
        if !headers.contains_key(CONTENT_TYPE) {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = request.body(body.to_owned()).send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = read_body(response).await?;
        Ok(Exchange {
            status,
            headers,
            body,
        })
    }

    /// Like [`create`](Self::create) for the first actor, but waits out 409 (request in flight)
    /// answers, honouring a short `Retry-After`, a bounded number of times.
    pub(crate) async fn create_settled(
        &self,
        key: &str,
        body: &str,
    ) -> Result<Exchange, RequestError> {
        let mut attempt = 0;
        loop {
            let response = self.create(Actor::First, Some(key), body).await?;
            attempt += 1;
            if response.status != 409 || attempt >= SETTLE_ATTEMPTS {
                return Ok(response);
            }
            tokio::time::sleep(retry_after(&response)).await;
        }
    }

    /// The first actor's resource ids from the list endpoint, or `None` without `--list`.
    pub(crate) async fn list(&self) -> Result<Option<Ids>, RequestError> {
        let Some(url) = &self.config.list_url else {
            return Ok(None);
        };
        let response = self
            .client
            .get(url.clone())
            .headers(self.config.headers.clone())
            .send()
            .await?;
        let status = response.status();
        let body = read_body(response).await?;
        if !status.is_success() {
            return Err(RequestError(format!("the list endpoint answered {status}")));
        }
        let json = serde_json::from_slice(&body).ok();
        match json.as_ref().and_then(resources::list_ids) {
            Some(ids) => Ok(Some(ids)),
            None => Err(RequestError(
                "the list endpoint returned no JSON array".to_owned(),
            )),
        }
    }

    /// The ids listed now that were not in `before` (`None` without `--list`).
    pub(crate) async fn added_since(
        &self,
        before: Option<&Ids>,
    ) -> Result<Option<Vec<String>>, RequestError> {
        let after = self.list().await?;
        Ok(before
            .zip(after.as_ref())
            .map(|(before, after)| resources::added(before, after)))
    }

    /// The bytes of a first-actor `POST` of `body` with a raw `key`.
    pub(crate) fn raw_post(&self, key: Option<&[u8]>, body: &str) -> Vec<u8> {
        self.target.post(&self.config.headers, key, body.as_bytes())
    }

    /// Sends raw request bytes on a new connection and reads the answer.
    pub(crate) async fn raw_exchange(&self, request: &[u8]) -> Result<Exchange, RequestError> {
        Ok(raw::exchange(&self.target.addr, request, self.config.timeout).await?)
    }
}

/// The body of `response`, read chunk by chunk so that a server streaming without end is cut
/// off at [`MAX_BODY_BYTES`] (`Response::bytes` would buffer all of it). The client's total
/// timeout also covers this read.
async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, RequestError> {
    let too_large = || RequestError(body_too_large());
    // A length announced past the limit fails before any of the body is read.
    let announced = response.content_length().unwrap_or(0);
    if usize::try_from(announced).unwrap_or(usize::MAX) > MAX_BODY_BYTES {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let total = body.len().checked_add(chunk.len());
        if total.is_none_or(|total| total > MAX_BODY_BYTES) {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The pause before retrying a 409: its `Retry-After` in seconds, kept within 50 ms..=1 s, or
/// 100 ms without one.
fn retry_after(response: &Exchange) -> Duration {
    let seconds = response
        .header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok());
    let wait = seconds.map_or(Duration::from_millis(100), Duration::from_secs);
    wait.clamp(Duration::from_millis(50), SETTLE_MAX_WAIT)
}
