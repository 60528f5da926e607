//! The middleware: a key for each logical request, then attempts until the table says the
//! answer is final or the policy's limits are reached.

use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderValue, Method};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::{self, Received};
use crate::classify::{self, Reason};
use crate::key::IDEMPOTENCY_KEY;
use crate::{Delivery, Error, IdempotencyKey, Policy, backoff, observe};

/// Middleware that gives each create request an `Idempotency-Key` and retries it, with the
/// same key, exactly when the retry table says a retry is safe and may help.
///
/// ```no_run
/// use idemkey_reqwest::{IdempotencyMiddleware, Delivery};
///
/// # async fn run() -> Result<(), reqwest_middleware::Error> {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(IdempotencyMiddleware::default())
///     .build();
/// let response = client.post("http://127.0.0.1:8080/notes").body("{}").send().await?;
/// let delivery = response.extensions().get::<Delivery>().unwrap();
/// println!("key {:?}, {} attempt(s)", delivery.key, delivery.attempts);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct IdempotencyMiddleware {
    policy: Arc<Policy>,
}

impl IdempotencyMiddleware {
    /// The middleware with `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy: Arc::new(policy),
        }
    }
}

#[async_trait::async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if !self.policy.covers(request.url()) {
            return next.run(request, extensions).await;
        }
        let key = self.key(&mut request, extensions);
        let safe = key.is_some() || idempotent(request.method());
        let attempts = Attempts {
            policy: &self.policy,
            key,
            safe,
            deadline: later(Instant::now(), self.policy.max_elapsed),
        };
        attempts.run(request, extensions, next).await
    }
}

impl IdempotencyMiddleware {
    /// Sets the key a request is sent with, and returns it: the request's own, else the
    /// caller's [`IdempotencyKey`] extension, else a fresh one for the configured methods.
    fn key(&self, request: &mut Request, extensions: &Extensions) -> Option<String> {
        if let Some(own) = request.headers().get(IDEMPOTENCY_KEY) {
            return Some(key_text(own));
        }
        let key = match extensions.get::<IdempotencyKey>() {
            Some(key) => key.clone(),
            None if self.policy.keys(request.method()) => IdempotencyKey::random(),
            None => return None,
        };
        request
            .headers_mut()
            .insert(IDEMPOTENCY_KEY, key.header_value());
        Some(key.as_str().to_owned())
    }
}

/// A header's key as text, unquoted when it is a valid key in the quoted form.
fn key_text(value: &HeaderValue) -> String {
    match IdempotencyKey::new(&String::from_utf8_lossy(value.as_bytes())) {
        Ok(key) => key.as_str().to_owned(),
        Err(_) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
    }
}

/// `now + by`, or a time a century away when an `Instant` cannot hold that (a `Duration::MAX`
/// setting, a `Retry-After` of many digits): never a panic.
fn later(now: Instant, by: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    now.checked_add(by)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

/// RFC 9110 §9.2.2: sending one of these again has the effect of sending it once.
fn idempotent(method: &Method) -> bool {
    [
        Method::GET,
        Method::HEAD,
        Method::OPTIONS,
        Method::TRACE,
        Method::PUT,
        Method::DELETE,
    ]
    .contains(method)
}

/// One logical request's attempts.
struct Attempts<'p> {
    policy: &'p Policy,
    key: Option<String>,
    /// Keyed or idempotent: an attempt whose outcome is unknown may be sent again.
    safe: bool,
    deadline: Instant,
}

/// An attempt still waiting when the policy's time ran out.
#[derive(Debug, thiserror::Error)]
#[error("no answer within the {0:?} the policy allows a request")]
struct OutOfTime(Duration);

/// How one attempt ended.
enum Ended {
    Answer(Received),
    Failed(classify::Failure, reqwest_middleware::Error),
}

impl Attempts<'_> {
    async fn run(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            // The copy kept for a retry; none for a stream body, which is sent once.
            let spare = request.try_clone();
            let span = observe::attempt_span(
                request.method(),
                request.url(),
                self.key.as_deref(),
                attempt,
            );
            let ended = self
                .attempt(request, extensions, next.clone())
                .instrument(span.clone())
                .await;
            let Some(reason) = self.retry_reason(&ended) else {
                return self.deliver(ended, attempt);
            };
            span.record("retry", reason.as_str());
            if attempt > self.policy.max_retries {
                observe::gave_up(reason, "attempts");
                return self.give_up(ended, reason, attempt);
            }
            let wait = self.wait(&ended, attempt - 1);
            if later(Instant::now(), wait) >= self.deadline {
                observe::gave_up(reason, "time");
                return self.give_up(ended, reason, attempt);
            }
            // Only a retry the limits allow makes a stream body's one attempt an error.
            let Some(again) = spare else {
                observe::gave_up(reason, "stream");
                return Err(self.stream_error(ended, reason));
            };
            observe::retrying(reason);
            tokio::time::sleep(wait).await;
            request = again;
        }
    }

    /// Sends one attempt and reads its answer, within the time left: a timeout of the
    /// attempt's own (not the request's, which would replace the client's).
    async fn attempt(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Ended {
        let left = self.deadline.saturating_duration_since(Instant::now());
        observe::attempted();
        match tokio::time::timeout(left, self.exchange(request, extensions, next)).await {
            Ok(ended) => ended,
            Err(_) => Ended::Failed(
                classify::Failure::Timeout,
                reqwest_middleware::Error::middleware(OutOfTime(self.policy.max_elapsed)),
            ),
        }
    }

    async fn exchange(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Ended {
        let response = match next.run(request, extensions).await {
            Ok(response) => response,
            Err(error) => return Ended::Failed(attempt::failure(&error), error),
        };
        tracing::Span::current().record("status", response.status().as_u16());
        if !self.safe {
            // Final whatever happens next: nothing to read before handing it on.
            return Ended::Answer(Received::unread(response));
        }
        match attempt::receive(response, self.policy.buffer_limit).await {
            Ok(received) => Ended::Answer(received),
            Err(error) => Ended::Failed(classify::Failure::CutOff, error.into()),
        }
    }

    /// The table's row for the attempt, if it says to retry and the request may be retried.
    fn retry_reason(&self, ended: &Ended) -> Option<Reason> {
        let reason = match ended {
            Ended::Answer(received) => {
                classify::answer(received.answer(), self.policy.retry_server_errors)
            }
            Ended::Failed(failure, _) => classify::failure(*failure),
        }?;
        (self.safe || reason.nothing_sent()).then_some(reason)
    }

    /// The wait before the next attempt: what the answer asks for, capped, else the backoff.
    fn wait(&self, ended: &Ended, retries: u32) -> Duration {
        let asked = match ended {
            Ended::Answer(received) => received.retry_after(),
            Ended::Failed(..) => None,
        };
        match asked {
            Some(asked) => asked.min(self.policy.max_retry_after),
            None => backoff::full_jitter(
                self.policy.initial_backoff,
                self.policy.max_backoff,
                retries,
                &mut rand::rng(),
            ),
        }
    }

    /// The final outcome: the answer, with its [`Delivery`], or the attempt's error.
    fn deliver(&self, ended: Ended, attempts: u32) -> reqwest_middleware::Result<Response> {
        match ended {
            Ended::Answer(received) => {
                let replayed = received.replayed();
                let mut response = received.response;
                response.extensions_mut().insert(Delivery {
                    key: self.key.clone(),
                    attempts,
                    replayed,
                });
                Ok(response)
            }
            Ended::Failed(_, error) => Err(error),
        }
    }

    /// Out of attempts or time: the last answer is the final one; no answer is an error.
    fn give_up(
        &self,
        ended: Ended,
        reason: Reason,
        attempts: u32,
    ) -> reqwest_middleware::Result<Response> {
        match ended {
            Ended::Answer(_) => self.deliver(ended, attempts),
            Ended::Failed(_, source) => Err(reqwest_middleware::Error::middleware(Error::GaveUp {
                key: self.key.clone(),
                attempts,
                reason,
                source,
            })),
        }
    }

    fn stream_error(&self, ended: Ended, reason: Reason) -> reqwest_middleware::Error {
        let (status, source) = match ended {
            Ended::Answer(received) => (Some(received.response.status()), None),
            Ended::Failed(_, error) => (None, Some(error)),
        };
        reqwest_middleware::Error::middleware(Error::StreamNotRetryable {
            key: self.key.clone(),
            reason,
            status,
            source,
        })
    }
}
