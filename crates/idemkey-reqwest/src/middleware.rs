//! The middleware: a key for each logical request, then its attempts (`logical.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::Extensions;
use reqwest::{Request, Response, Url};
use reqwest_middleware::{Middleware, Next};

use crate::key::IDEMPOTENCY_KEY;
use crate::logical::Attempts;
use crate::{IdempotencyKey, Policy};

/// Middleware that gives each create request to a server that honours keys an
/// `Idempotency-Key`, and retries it, with the same key, exactly when the retry table says a
/// retry is safe and may help.
///
/// The reqwest client under it must not follow redirects itself (the middleware does, hop by
/// hop): build both with [`client_builder`](crate::client_builder), or give the client
/// `redirect::Policy::none()`.
///
/// ```no_run
/// use idemkey_reqwest::{Delivery, IdempotencyMiddleware, Policy};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::for_base("http://127.0.0.1:8080/".parse()?);
/// let http = reqwest::Client::builder()
///     .redirect(reqwest::redirect::Policy::none())
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(http)
///     .with(IdempotencyMiddleware::new(policy))
///     .build();
/// let response = client.post("http://127.0.0.1:8080/notes").body("{}").send().await?;
/// let delivery = response.extensions().get::<Delivery>().unwrap();
/// println!("key {:?}, {} attempt(s)", delivery.key, delivery.attempts);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct IdempotencyMiddleware {
    policy: Arc<Policy>,
    /// Whether the warning that the client follows redirects itself was logged.
    warned: Arc<AtomicBool>,
}

impl IdempotencyMiddleware {
    /// The middleware with `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy: Arc::new(policy),
            warned: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A reqwest-middleware client builder with the middleware of `policy` on `client`, whose
/// redirects are turned off so that the middleware follows them hop by hop. Middleware added
/// after (`.with(..)`) runs inside it, once per attempt; `.build()` makes the client.
///
/// ```no_run
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use idemkey_reqwest::Policy;
///
/// let client = idemkey_reqwest::client_builder(
///     reqwest::Client::builder(),
///     Policy::for_base("https://api.example.com/v1/".parse()?),
/// )?
/// .build();
/// # Ok(())
/// # }
/// ```
pub fn client_builder(
    client: reqwest::ClientBuilder,
    policy: Policy,
) -> reqwest::Result<reqwest_middleware::ClientBuilder> {
    let client = client.redirect(reqwest::redirect::Policy::none()).build()?;
    Ok(reqwest_middleware::ClientBuilder::new(client).with(IdempotencyMiddleware::new(policy)))
}

#[async_trait::async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let key = self.key(&mut request, extensions);
        Attempts::new(self, key)
            .run(request, extensions, next)
            .await
    }
}

impl IdempotencyMiddleware {
    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Sets the key a request is sent with, records it in `extensions` (so that a retry layer
    /// outside this one sends the same bytes), and returns it: the request's own header,
    /// as written, else the [`IdempotencyKey`] extension's, else a fresh one for the
    /// configured methods on a server declared to honour keys.
    fn key(&self, request: &mut Request, extensions: &mut Extensions) -> Option<IdempotencyKey> {
        let key = match request.headers().get(IDEMPOTENCY_KEY) {
            // Not a key: sent as written, but nothing a retry could count on.
            Some(own) => IdempotencyKey::from_header(own).ok()?,
            None => {
                let key = match extensions.get::<IdempotencyKey>() {
                    Some(key) => key.clone(),
                    None if self.fresh_key_for(request) => IdempotencyKey::random(),
                    None => return None,
                };
                request
                    .headers_mut()
                    .insert(IDEMPOTENCY_KEY, key.header_value());
                key
            }
        };
        extensions.insert(key.clone());
        Some(key)
    }

    fn fresh_key_for(&self, request: &Request) -> bool {
        self.policy.keys(request.method()) && self.policy.honours_keys(request.url())
    }

    /// Logs once that the reqwest client follows redirects itself, out of the middleware's
    /// sight.
    pub(crate) fn warn_redirected(&self, from: &Url) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                host = from.host_str().unwrap_or(""),
                "idemkey: the reqwest client followed a redirect itself, so the middleware could \
                 not check the hop; build it with redirect::Policy::none()"
            );
        }
    }
}
