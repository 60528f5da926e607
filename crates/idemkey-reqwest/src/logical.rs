//! One logical request: its attempts, and redirect hops, until the table says the answer is
//! final or the policy's limits are reached.

use std::time::Duration;

use http::{Extensions, Method};
use reqwest::{Request, Response, Url};
use reqwest_middleware::Next;
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::{self, Head, Received};
use crate::budget::Budgets;
use crate::classify::{self, Failure, Reason};
use crate::key::IDEMPOTENCY_KEY;
use crate::middleware::IdempotencyMiddleware;
use crate::{Delivery, Error, IdempotencyKey, Policy, backoff, observe, redirect};

/// `now + by`, or a time a century away when an `Instant` cannot hold that (a `Duration::MAX`
/// setting, a `Retry-After` of many digits): never a panic.
pub(crate) fn later(now: Instant, by: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    now.checked_add(by)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

/// `future`'s output, unless `until` comes first.
async fn within<T>(until: Instant, future: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(until, future).await.ok()
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
pub(crate) struct Attempts<'m> {
    middleware: &'m IdempotencyMiddleware,
    policy: &'m Policy,
    key: Option<IdempotencyKey>,
    deadline: Instant,
    attempts: u32,
    /// Retries counted against the policy's limit: every one but polls.
    retries: u32,
    redirects: u32,
    /// The budget's tokens taken, by URL, given back when a final answer comes.
    taken: Vec<(Url, u32)>,
}

/// One attempt's request, as the table needs it.
struct Sent {
    url: Url,
    method: Method,
    /// It carried the logical request's key.
    keyed: bool,
    /// Keyed for a server declared to honour keys, or idempotent: an attempt whose outcome
    /// is unknown may be sent again.
    safe: bool,
}

/// An attempt still waiting when the policy's time ran out: the request's (`max_elapsed`) or
/// the attempt's own (`attempt_timeout`).
#[derive(Debug, thiserror::Error)]
#[error("no answer within the {limit:?} the policy allows {what}")]
struct OutOfTime {
    limit: Duration,
    what: &'static str,
}

/// How one attempt ended.
enum Ended {
    Answer(Received),
    Failed(Failure, reqwest_middleware::Error),
}

impl<'m> Attempts<'m> {
    /// The attempts of a request sent with `key` through `middleware`.
    pub(crate) fn new(middleware: &'m IdempotencyMiddleware, key: Option<IdempotencyKey>) -> Self {
        let policy = middleware.policy();
        Self {
            middleware,
            policy,
            key,
            deadline: later(Instant::now(), policy.max_elapsed),
            attempts: 0,
            retries: 0,
            redirects: 0,
            taken: Vec::new(),
        }
    }

    pub(crate) async fn run(
        &mut self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        loop {
            self.attempts += 1;
            // The copy kept for a retry or a redirect; none for a stream body, sent once.
            let spare = request.try_clone();
            let sent = self.sent(&request);
            let span =
                observe::attempt_span(&sent.method, &sent.url, self.key.as_ref(), self.attempts);
            let ended = self
                .attempt(request, &sent, extensions, next.clone())
                .instrument(span.clone())
                .await;
            if let Some(hop) = self.redirect(&ended, &sent, spare.as_ref()) {
                request = hop;
                continue;
            }
            let Some(reason) = self.retry_reason(&ended, &sent) else {
                return self.deliver(ended);
            };
            if !sent.safe && !reason.nothing_sent() {
                return self.not_retried(ended, reason, &sent);
            }
            span.record("retry", reason.as_str());
            let wait = match self.schedule(&ended, reason, &sent.url) {
                Ok(wait) => wait,
                Err(limit) => {
                    observe::gave_up(reason, limit);
                    return self.give_up(ended, reason);
                }
            };
            // Only a retry the limits allow makes a stream body's one attempt an error.
            let Some(again) = spare else {
                observe::gave_up(reason, "stream");
                self.give_back();
                return Err(self.stream_error(ended, reason));
            };
            observe::retrying(reason);
            tokio::time::sleep(wait).await;
            request = again;
        }
    }

    fn sent(&self, request: &Request) -> Sent {
        let keyed = self.key.is_some() && request.headers().contains_key(IDEMPOTENCY_KEY);
        let safe =
            idempotent(request.method()) || (keyed && self.policy.honours_keys(request.url()));
        Sent {
            url: request.url().clone(),
            method: request.method().clone(),
            keyed,
            safe,
        }
    }

    /// Sends one attempt and reads as much of its answer as the table needs: its head within
    /// the time left, and, for an answer that may call for a retry, its body too. The time is
    /// the attempt's own (not the request's, which would replace the client's timeout).
    async fn attempt(
        &self,
        request: Request,
        sent: &Sent,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Ended {
        observe::attempted();
        let until = self.attempt_deadline();
        let response = match within(until, next.run(request, extensions)).await {
            Some(Ok(response)) => response,
            Some(Err(error)) => return Ended::Failed(attempt::failure(&error), error),
            None => return self.out_of_time(until),
        };
        tracing::Span::current().record("status", response.status().as_u16());
        if !sent.safe {
            // Final whatever happens next: nothing to read before handing it on.
            return Ended::Answer(Received::unread(response));
        }
        let policy = self.policy;
        match attempt::head(
            &response,
            sent.keyed,
            policy.retry_server_errors,
            policy.buffer_limit,
        ) {
            Head::FinalStream => Ended::Answer(Received::unread(response)),
            Head::FinalShort => self.receive(response).await,
            Head::MayRetry => match within(until, self.receive(response)).await {
                Some(ended) => ended,
                None => self.out_of_time(until),
            },
        }
    }

    /// When the attempt starting now stops waiting: at the request's deadline, or sooner at
    /// the attempt's own limit.
    fn attempt_deadline(&self) -> Instant {
        match self.policy.attempt_timeout {
            Some(limit) => self.deadline.min(later(Instant::now(), limit)),
            None => self.deadline,
        }
    }

    /// A timeout at `until`, said to be the request's or the attempt's.
    fn out_of_time(&self, until: Instant) -> Ended {
        let error = match self.policy.attempt_timeout {
            Some(limit) if until < self.deadline => OutOfTime {
                limit,
                what: "an attempt",
            },
            _ => OutOfTime {
                limit: self.policy.max_elapsed,
                what: "a request",
            },
        };
        let error = reqwest_middleware::Error::middleware(error);
        Ended::Failed(Failure::Timeout, error)
    }

    async fn receive(&self, response: Response) -> Ended {
        match attempt::receive(response, self.policy.buffer_limit).await {
            Ok(received) => Ended::Answer(received),
            Err(error) => Ended::Failed(Failure::CutOff, error.into()),
        }
    }

    /// The next hop's request, when the answer is a redirect to follow.
    fn redirect(&mut self, ended: &Ended, sent: &Sent, spare: Option<&Request>) -> Option<Request> {
        let Ended::Answer(received) = ended else {
            return None;
        };
        let response = &received.response;
        if !redirect::is_redirect(response.status()) || self.redirects >= self.policy.max_redirects
        {
            return None;
        }
        let hop = redirect::next_hop(spare?, response.status(), response.headers())?;
        tracing::debug!(
            status = response.status().as_u16(),
            to = hop.url().host_str().unwrap_or(""),
            same_origin = redirect::same_origin(&sent.url, hop.url()),
            "idemkey: following a redirect"
        );
        self.redirects += 1;
        Some(hop)
    }

    /// The table's row for the attempt, if it says to retry.
    fn retry_reason(&self, ended: &Ended, sent: &Sent) -> Option<Reason> {
        match ended {
            Ended::Answer(received) => {
                if received.response.url() != &sent.url {
                    // The client followed redirects itself: the request that got this answer
                    // is not the one sent, so nothing says a retry is safe.
                    self.middleware.warn_redirected(&sent.url);
                    return None;
                }
                let answer = received.answer(sent.keyed);
                classify::answer(answer, self.policy.retry_server_errors)
            }
            Ended::Failed(failure, _) => classify::failure(*failure),
        }
    }

    /// The wait before the retry, or the limit that forbids it: `attempts`, `time` or
    /// `budget`. A retry that is not a poll counts against the limit and takes the budget's
    /// tokens.
    fn schedule(
        &mut self,
        ended: &Ended,
        reason: Reason,
        url: &Url,
    ) -> Result<Duration, &'static str> {
        let poll = reason.is_poll();
        if !poll && self.retries >= self.policy.max_retries {
            return Err("attempts");
        }
        let now = Instant::now();
        let left = self.deadline.saturating_duration_since(now);
        let mut wait = self.wait(ended);
        if wait >= left {
            return Err("time");
        }
        if !poll {
            let (budget, cost) = (self.policy.budget, reason.cost());
            let owed = Budgets::shared()
                .take(budget, url, cost, now, left)
                .ok_or("budget")?;
            if owed >= left {
                Budgets::shared().give_back(budget, url, cost, now);
                return Err("budget");
            }
            self.taken.push((url.clone(), cost));
            self.retries += 1;
            wait = wait.max(owed);
        }
        Ok(wait)
    }

    /// The wait the answer asks for, within the policy's floor and cap, else the backoff.
    fn wait(&self, ended: &Ended) -> Duration {
        let asked = match ended {
            Ended::Answer(received) => received.retry_after(),
            Ended::Failed(..) => None,
        };
        let policy = self.policy;
        match asked {
            Some(asked) => asked
                .max(policy.min_retry_after)
                .min(policy.max_retry_after),
            None => backoff::full_jitter(
                policy.initial_backoff,
                policy.max_backoff,
                self.attempts - 1,
                &mut rand::rng(),
            ),
        }
    }

    /// Gives the budget back the tokens this request's retries took.
    fn give_back(&mut self) {
        let now = Instant::now();
        for (url, cost) in self.taken.drain(..) {
            Budgets::shared().give_back(self.policy.budget, &url, cost, now);
        }
    }

    /// The final answer, with its [`Delivery`], or the attempt's error.
    fn deliver(&mut self, ended: Ended) -> reqwest_middleware::Result<Response> {
        match ended {
            Ended::Answer(received) => {
                self.give_back();
                Ok(self.delivered(received))
            }
            Ended::Failed(_, error) => Err(error),
        }
    }

    fn delivered(&self, received: Received) -> Response {
        let replayed = received.replayed();
        let mut response = received.response;
        response.extensions_mut().insert(Delivery {
            key: self.key.clone(),
            attempts: self.attempts,
            replayed,
            redirects: self.redirects,
        });
        response
    }

    /// An attempt the table would retry but that is not safe to send again: its answer is
    /// final; no answer is an outcome unknown, said so.
    fn not_retried(
        &mut self,
        ended: Ended,
        reason: Reason,
        sent: &Sent,
    ) -> reqwest_middleware::Result<Response> {
        match ended {
            Ended::Answer(received) => Ok(self.delivered(received)),
            Ended::Failed(_, source) => {
                tracing::warn!(
                    reason = reason.as_str(),
                    "idemkey: outcome unknown, not retried"
                );
                Err(reqwest_middleware::Error::middleware(Error::NotRetried {
                    key: self.key.clone(),
                    method: sent.method.clone(),
                    origin: sent.url.origin().ascii_serialization(),
                    reason,
                    source,
                }))
            }
        }
    }

    /// Out of attempts, time or budget: the last answer is the final one; no answer is an
    /// error.
    fn give_up(&mut self, ended: Ended, reason: Reason) -> reqwest_middleware::Result<Response> {
        match ended {
            Ended::Answer(received) => Ok(self.delivered(received)),
            Ended::Failed(_, source) => Err(reqwest_middleware::Error::middleware(Error::GaveUp {
                key: self.key.clone(),
                attempts: self.attempts,
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
