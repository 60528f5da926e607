//! The client half of idempotency keys: a [`reqwest_middleware`] middleware that gives each
//! create request one `Idempotency-Key`, keeps it on every retry, and retries exactly the
//! failures a retry is safe for and can mend.
//!
//! A create request that gets no answer leaves its client unable to tell "failed before
//! creating" from "created, answer lost". Sent again under the same key, a server that
//! honours keys (the IETF draft's protocol: idemkey's layer, service and proxy, Stripe, and
//! others) executes it at most once and answers the retry with the first result.
//!
//! ```no_run
//! use idemkey_reqwest::{Delivery, IdempotencyMiddleware, Policy};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(IdempotencyMiddleware::new(
//!         Policy::default().limit_to("http://127.0.0.1:8080/".parse()?),
//!     ))
//!     .build();
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
//! A request is *safe to send again* when it carries a key or its method is idempotent (GET,
//! HEAD, OPTIONS, TRACE, PUT, DELETE). Only those are retried, by these rows; any other
//! request is retried only when its connection could not be made (nothing was sent).
//!
//! | outcome of an attempt | then |
//! | --- | --- |
//! | no answer: connection refused or reset, a timeout, an answer cut off | retry, same key |
//! | 408 (idemkey's `body-unreadable` after a body deadline) | retry |
//! | 409 `request-in-flight` (or any 409 with `Retry-After`) | wait, retry |
//! | 429, 503 (with or without `Retry-After`), 502, 504 | retry |
//! | 500 `outcome-unknown` | retry |
//! | any answer with `Idempotent-Replayed: true`, or 500 `previous-attempt-unknown` | final: the key's stored answer |
//! | any other answer with `Stripe-Should-Retry: true` / `false` | retry / final: the server's word |
//! | 422 `key-reused`, 400 `key-missing` / `key-invalid`, every other 4xx | final, never retried |
//! | 500 `store-failed` or `no-transaction` | final: a failure on the server a retry cannot mend |
//! | another 5xx | retry ([`Policy::retry_server_errors`], on by default) |
//! | anything else (1xx, 2xx, 3xx) | final |
//!
//! The wait before a retry is the answer's `Retry-After` (seconds or an HTTP-date), capped by
//! [`Policy::max_retry_after`]; else exponential backoff with full jitter (0.5 s doubling to
//! 5 s by default). Attempts stop at [`Policy::max_retries`] retries or
//! [`Policy::max_elapsed`] after the first attempt, whichever comes first; then the last
//! answer is returned, or, with none, [`Error::GaveUp`].
//!
//! # Servers that ignore keys
//!
//! Against a server that does not honour `Idempotency-Key`, a retry after an unknown outcome
//! can execute a create twice. Limit the middleware to the servers that honour keys with
//! [`Policy::limit_to`]; requests elsewhere pass through untouched.
//!
//! # Bodies
//!
//! A request body in memory (bytes, text, JSON, a form) is sent again on each attempt. A
//! stream cannot be: such a request is sent once, and if its attempt needs a retry the
//! caller gets [`Error::StreamNotRetryable`].
//!
//! # What the caller learns
//!
//! Every answer the middleware hands on carries a [`Delivery`] in its extensions: the key,
//! the attempts made, and whether the answer was a replay. Each attempt runs in a tracing
//! span `idemkey.attempt` at DEBUG (attempt, method, host, key, status, retry), and the `metrics`
//! facade counts `idemkey_client_attempts_total`, `idemkey_client_retries_total{reason}` and
//! `idemkey_client_give_ups_total{reason, limit}`.

mod attempt;
mod backoff;
mod classify;
mod delivery;
mod error;
mod key;
mod middleware;
mod observe;
mod policy;
mod retry_after;

pub use classify::Reason;
pub use delivery::Delivery;
pub use error::Error;
pub use key::{IDEMPOTENCY_KEY, IdempotencyKey, KeyChoiceError};
pub use middleware::IdempotencyMiddleware;
pub use policy::Policy;

/// reqwest-middleware, whose `ClientBuilder` takes the middleware.
pub use reqwest_middleware;
