//! The client half of idempotency keys: a [`reqwest_middleware`] middleware that gives each
//! create request one `Idempotency-Key`, keeps it on every retry, and retries exactly the
//! failures a retry is safe for and can mend.
//!
//! A create request that gets no answer leaves its client unable to tell "failed before
//! creating" from "created, answer lost". Sent again under the same key, a server that
//! honours keys (the IETF draft's protocol: idemkey's layer, service and proxy, Stripe, and
//! others) executes it at most once and answers the retry with the first result.
//!
//! A key makes a retry safe only where the server honours it; against a server that ignores
//! it, a retry after a lost answer creates again. So the middleware retries unknown outcomes
//! only for the servers the caller declares to honour keys: [`Policy::for_base`] (and
//! [`Policy::with_base`], [`Policy::honoured_where`]). Elsewhere requests get no key, and only
//! what is safe without the server's help is retried: a request that was never sent (its
//! connection could not be made), and idempotent methods; a create whose answer was lost
//! there ends in [`Error::NotRetried`], which says the outcome is unknown.
//!
//! ```no_run
//! use idemkey_reqwest::{Delivery, Policy};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // This API honours keys: its lost answers are retried under the request's key.
//! let policy = Policy::for_base("http://127.0.0.1:8080/".parse()?);
//! // Redirects off in reqwest: the middleware follows them, hop by hop.
//! let client = idemkey_reqwest::client_builder(reqwest::Client::builder(), policy)?.build();
//! let response = client
//!     .post("http://127.0.0.1:8080/notes")
//!     .header("authorization", "Bearer alice-secret")
//!     .body(r#"{"title":"a","body":"b"}"#)
//!     .send()
//!     .await?;
//! let delivery = response.extensions().get::<Delivery>().cloned();
//! println!("{} after {:?}", response.status(), delivery);
//! # Ok(())
//! # }
//! ```
//!
//! # The retry table
//!
//! A request is *safe to send again* when it carries a key and its server is declared to
//! honour keys, or its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE). Only
//! those are retried, by these rows; any other request is retried only when its connection
//! could not be made (nothing was sent).
//!
//! | outcome of an attempt | then |
//! | --- | --- |
//! | no answer: connection refused or reset, a timeout, an answer cut off | retry, same key |
//! | 408 (idemkey's `body-unreadable` after a body deadline) | retry |
//! | 409 `request-in-flight`, or any 409 with `Retry-After` | wait, poll (counted against time) |
//! | another 409 to a keyed request, unless its type is `key-reused` | retry after backoff |
//! | 429, 503 (with or without `Retry-After`), 502, 504 | retry |
//! | 500 `outcome-unknown` | retry |
//! | any answer with `Idempotent-Replayed: true`, or 500 `previous-attempt-unknown` | final: the key's stored answer |
//! | any other answer with `Stripe-Should-Retry: true` / `false` | retry / final: the server's word |
//! | 422 or 409 `key-reused`, 400 `key-missing` / `key-invalid`, every other 4xx | final, never retried |
//! | 500 `store-failed` or `no-transaction` | final: a failure on the server a retry cannot mend |
//! | another 5xx | retry ([`Policy::retry_server_errors`], on by default) |
//! | a redirect (301, 302, 303, 307, 308) | followed, hop by hop ([`Policy::max_redirects`]) |
//! | anything else (1xx, 2xx, 304) | final |
//!
//! The wait before a retry is the answer's `Retry-After` (seconds or an HTTP-date), at least
//! [`Policy::min_retry_after`] and at most [`Policy::max_retry_after`]; else exponential
//! backoff with full jitter (0.5 s doubling to 5 s by default). Retries stop at
//! [`Policy::max_retries`] (polls of a request in flight are not counted) or
//! [`Policy::max_elapsed`] after the first attempt, whichever comes first, and wait for the
//! host's [retry budget](Policy::retry_budget) when many fail at once; then the last answer is
//! returned, or, with none, [`Error::GaveUp`].
//!
//! # Redirects
//!
//! The middleware follows redirects itself, so the reqwest client must not: build it with
//! [`client_builder`], or with `redirect::Policy::none()`. Each hop is a request of its own:
//! checked against the declared servers, stripped of the key and credentials when it leaves
//! the origin, and retried, if at all, for its own URL.
//!
//! # Bodies
//!
//! A request body in memory (bytes, text, JSON, a form) is sent again on each attempt. A
//! stream cannot be: such a request is sent once, and if its attempt needs a retry the
//! caller gets [`Error::StreamNotRetryable`].
//!
//! An answer is handed on as soon as its head arrives when it is final and of unknown length,
//! longer than [`Policy::buffer_limit`], or `text/event-stream`: a stream reaches the caller
//! as it is sent, and the time limit stops counting at its head. A final answer that says its
//! length within the limit is read first, so that one cut off is retried and replayed.
//!
//! # One key, one form
//!
//! The key (the request's own header, as written, else its [`IdempotencyKey`] extension, else
//! a fresh one) goes into the request's extensions before the first attempt, so a retry layer
//! outside this middleware (reqwest-retry, tower's retry) sends the same bytes on its own
//! retries; [`Delivery`] and [`Error`] give it in that form.
//!
//! # What the caller learns
//!
//! Every answer the middleware hands on carries a [`Delivery`] in its extensions: the key,
//! the attempts made, the redirects followed, and whether the answer was a replay. Each
//! attempt runs in a tracing span `idemkey.attempt` at DEBUG (attempt, method, host, key,
//! status, retry), and the `metrics` facade counts `idemkey_client_attempts_total`,
//! `idemkey_client_retries_total{reason}` and `idemkey_client_give_ups_total{reason, limit}`.

mod attempt;
mod backoff;
mod budget;
mod classify;
mod delivery;
mod error;
mod key;
mod logical;
mod middleware;
mod observe;
mod policy;
mod redirect;
mod retry_after;

pub use classify::Reason;
pub use delivery::Delivery;
pub use error::Error;
pub use key::{IDEMPOTENCY_KEY, IdempotencyKey, KeyChoiceError};
pub use middleware::{IdempotencyMiddleware, client_builder};
pub use policy::Policy;

/// reqwest-middleware, whose `ClientBuilder` takes the middleware.
pub use reqwest_middleware;
