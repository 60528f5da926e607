//! What the middleware keys and how it retries.

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use reqwest::Url;

/// What the middleware keys and how it retries; every setting has a documented default.
///
/// A key makes a retry safe only on a server that honours it, so the policy names the
/// servers that do: [`for_base`](Self::for_base) (then [`with_base`](Self::with_base) for
/// more), or [`honoured_where`](Self::honoured_where). Requests to those get a key and every
/// retry of the table. Requests elsewhere get no key and are sent again only where that is
/// safe without the server's help: when nothing was sent (the connection could not be made),
/// and for idempotent methods. [`Policy::default`] declares no server.
///
/// ```
/// use std::time::Duration;
/// use idemkey_reqwest::Policy;
///
/// let policy = Policy::for_base("https://api.example.com/v1/".parse().unwrap())
///     .max_retries(4)
///     .max_elapsed(Duration::from_secs(20));
/// ```
#[derive(Clone)]
pub struct Policy {
    pub(crate) methods: Vec<Method>,
    pub(crate) max_retries: u32,
    pub(crate) max_elapsed: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) min_retry_after: Duration,
    pub(crate) max_retry_after: Duration,
    pub(crate) retry_server_errors: bool,
    pub(crate) buffer_limit: usize,
    pub(crate) max_redirects: u32,
    pub(crate) budget: Budget,
    bases: Vec<Url>,
    honoured: Option<Arc<Honoured>>,
}

/// A caller's rule for which URLs honour keys.
type Honoured = dyn Fn(&Url) -> bool + Send + Sync;

/// The retry budget's numbers: a token bucket per host (see [`Policy::retry_budget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Budget {
    pub(crate) burst: u32,
    pub(crate) per_second: u32,
}

impl Default for Policy {
    /// Declares no server that honours keys: no request gets a key, and only what is safe
    /// without the server's help is retried. Name the servers with
    /// [`with_base`](Self::with_base) or [`honoured_where`](Self::honoured_where).
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            max_retries: 10,
            max_elapsed: Duration::from_secs(60),
            attempt_timeout: None,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            min_retry_after: Duration::from_millis(100),
            max_retry_after: Duration::from_secs(30),
            retry_server_errors: true,
            buffer_limit: 4 * 1024 * 1024,
            max_redirects: 10,
            budget: Budget {
                burst: 100,
                per_second: 10,
            },
            bases: Vec::new(),
            honoured: None,
        }
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("methods", &self.methods)
            .field("max_retries", &self.max_retries)
            .field("max_elapsed", &self.max_elapsed)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("min_retry_after", &self.min_retry_after)
            .field("max_retry_after", &self.max_retry_after)
            .field("retry_server_errors", &self.retry_server_errors)
            .field("buffer_limit", &self.buffer_limit)
            .field("max_redirects", &self.max_redirects)
            .field("budget", &self.budget)
            .field("bases", &self.bases)
            .field("honoured_where", &self.honoured.is_some())
            .finish()
    }
}

impl Policy {
    /// The policy for a server that honours keys under `base`: the defaults, with `base`
    /// declared as by [`with_base`](Self::with_base).
    pub fn for_base(base: Url) -> Self {
        Self::default().with_base(base)
    }

    /// Declares that the server honours keys for requests under `base` (same scheme, host
    /// and port; its path as a prefix, segment by segment); called again, under any of them.
    #[must_use]
    pub fn with_base(mut self, base: Url) -> Self {
        self.bases.push(base);
        self
    }

    /// Declares that keys are honoured for the URLs `honoured` accepts, besides the bases.
    /// `idemkey send`, whose user names the one URL, declares it this way.
    #[must_use]
    pub fn honoured_where(
        mut self,
        honoured: impl Fn(&Url) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.honoured = Some(Arc::new(honoured));
        self
    }

    /// The methods that get a fresh key when the request has none, on a server that honours
    /// keys. Defaults to `POST` and `PATCH`.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Retries after the first attempt, at most. Defaults to 10. Polls of a request still in
    /// flight (409 `request-in-flight`, or a 409 with `Retry-After`) are not counted: they
    /// are bounded by [`max_elapsed`](Self::max_elapsed).
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The time from the first attempt after which no attempt starts and none waits on for
    /// its answer: each attempt's wait is cut to what is left. Once a final answer's head has
    /// arrived the limit stops counting: its body is the caller's to read. Defaults to 60 s.
    #[must_use]
    pub fn max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
        self
    }

    /// The most time one attempt waits for its answer's head (and, for an answer that may
    /// call for a retry, its body), within [`max_elapsed`](Self::max_elapsed): a stalled
    /// server is retried without taking the whole time. Unlike a reqwest timeout, it never
    /// cuts the body of a final answer, a stream say. Defaults to none: `max_elapsed` alone.
    #[must_use]
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// The backoff's first ceiling, doubled at each retry up to
    /// [`max_backoff`](Self::max_backoff); the wait is uniform below the ceiling (full
    /// jitter). Defaults to 500 ms.
    #[must_use]
    pub fn initial_backoff(mut self, initial: Duration) -> Self {
        self.initial_backoff = initial;
        self
    }

    /// The backoff's highest ceiling. Defaults to 5 s.
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> Self {
        self.max_backoff = max;
        self
    }

    /// The shortest wait a server's `Retry-After` gets: `Retry-After: 0`, or a date in the
    /// past, waits this long. Defaults to 100 ms.
    #[must_use]
    pub fn min_retry_after(mut self, min: Duration) -> Self {
        self.min_retry_after = min;
        self
    }

    /// The longest wait a server's `Retry-After` gets; a longer one waits this long.
    /// Defaults to 30 s.
    #[must_use]
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// Whether a 5xx outside the table's named rows (500 other than `outcome-unknown`, 501,
    /// 505, ...) is retried. idemkey releases a claim whose handler answered 5xx, so a retry
    /// executes again. Defaults to `true`.
    #[must_use]
    pub fn retry_server_errors(mut self, retry: bool) -> Self {
        self.retry_server_errors = retry;
        self
    }

    /// How much of an answer's body may be read before the answer is handed on, so that an
    /// answer cut off within it is retried: an answer whose status may call for a retry, and
    /// a final answer that says its length and is no longer. Any other answer (a stream such
    /// as `text/event-stream`, a body of unknown length or a longer one) is handed on as soon
    /// as its head arrives, and a cut reaches the caller as a body error. Defaults to 4 MiB.
    #[must_use]
    pub fn buffer_limit(mut self, bytes: usize) -> Self {
        self.buffer_limit = bytes;
        self
    }

    /// Redirects followed, at most; the next one is handed on as the answer. The middleware
    /// follows them itself, hop by hop (the reqwest client must not: build it with
    /// `redirect::Policy::none()`, as [`client_builder`](crate::client_builder) does). Each
    /// hop is checked against the declared servers, loses the key (and credentials) when it
    /// leaves the origin, and is retried, if at all, for its own URL. Defaults to 10.
    #[must_use]
    pub fn max_redirects(mut self, redirects: u32) -> Self {
        self.max_redirects = redirects;
        self
    }

    /// The retry budget, per host (scheme, host and port), shared by every request of the
    /// process through a middleware with the same budget, as the AWS SDKs share a retry
    /// partition's among clients: a bucket of `burst` tokens, refilled at `per_second`.
    /// A retry takes a token, two after a timeout or a lost answer (the server may still be
    /// working on it), and waits for them when the bucket is empty; a retried request that
    /// gets a final answer gives its tokens back. Polls of a request in flight take none. So
    /// in an outage the retries of all callers together stay within `burst` plus `per_second`
    /// a second, however many callers there are. Defaults to 100 and 10, the AWS SDKs'
    /// standard mode's bucket (500 tokens, 5 a retry) with a refill over time.
    #[must_use]
    pub fn retry_budget(mut self, burst: u32, per_second: u32) -> Self {
        self.budget = Budget { burst, per_second };
        self
    }

    /// Whether the server of `url` is declared to honour keys.
    pub fn honours_keys(&self, url: &Url) -> bool {
        self.bases.iter().any(|base| under(base, url))
            || self.honoured.as_ref().is_some_and(|honoured| honoured(url))
    }

    /// Whether a request of `method` with no key gets one.
    pub(crate) fn keys(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }
}

/// Whether `url` is `base` or below it.
fn under(base: &Url, url: &Url) -> bool {
    if base.scheme() != url.scheme()
        || base.host_str() != url.host_str()
        || base.port_or_known_default() != url.port_or_known_default()
    {
        return false;
    }
    let prefix = base.path().trim_end_matches('/');
    match url.path().strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(bases: &[&str], url: &str) -> bool {
        let policy = bases
            .iter()
            .fold(Policy::default(), |p, b| p.with_base(b.parse().unwrap()));
        policy.honours_keys(&url.parse().unwrap())
    }

    #[test]
    fn by_default_no_server_is_declared() {
        assert!(!covers(&[], "http://anywhere.example/x"));
    }

    #[test]
    fn a_rule_declares_the_urls_it_accepts() {
        let policy = Policy::for_base("https://a.example/".parse().unwrap())
            .honoured_where(|url| url.host_str() == Some("b.example"));
        let honours = |url: &str| policy.honours_keys(&url.parse().unwrap());
        assert!(honours("https://a.example/x") && honours("http://b.example/y"));
        assert!(!honours("https://c.example/"));
    }

    #[test]
    fn a_base_covers_its_own_path_and_below_only() {
        let base = ["https://api.example.com/v1/"];
        assert!(covers(&base, "https://api.example.com/v1"));
        assert!(covers(&base, "https://api.example.com/v1/notes?x=1"));
        assert!(covers(&base, "https://api.example.com:443/v1/notes"));
        assert!(!covers(&base, "https://api.example.com/v10/notes"));
        assert!(!covers(&base, "https://api.example.com/"));
        assert!(!covers(&base, "http://api.example.com/v1/notes"));
        assert!(!covers(&base, "https://api.example.com:8443/v1/notes"));
        assert!(!covers(&base, "https://other.example.com/v1/notes"));
    }

    #[test]
    fn a_host_root_covers_the_whole_host() {
        let base = ["http://127.0.0.1:8080"];
        assert!(covers(&base, "http://127.0.0.1:8080/notes"));
        assert!(!covers(&base, "http://127.0.0.1:8081/notes"));
    }

    #[test]
    fn several_bases_cover_their_union() {
        let bases = ["https://a.example/x", "https://b.example/"];
        assert!(covers(&bases, "https://a.example/x/1"));
        assert!(covers(&bases, "https://b.example/y"));
        assert!(!covers(&bases, "https://a.example/y"));
    }

    #[test]
    fn post_and_patch_are_keyed_by_default() {
        let policy = Policy::default();
        assert!(policy.keys(&Method::POST) && policy.keys(&Method::PATCH));
        assert!(!policy.keys(&Method::PUT) && !policy.keys(&Method::GET));
    }
}
