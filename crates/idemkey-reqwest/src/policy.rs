//! What the middleware keys and how it retries.

use std::time::Duration;

use http::Method;
use reqwest::Url;

/// What the middleware keys and how it retries; every setting has a documented default.
///
/// ```
/// use std::time::Duration;
/// use idemkey_reqwest::Policy;
///
/// let policy = Policy::default()
///     .max_retries(4)
///     .max_elapsed(Duration::from_secs(20))
///     .limit_to("https://api.example.com/v1/".parse().unwrap());
/// ```
#[derive(Clone, Debug)]
pub struct Policy {
    pub(crate) methods: Vec<Method>,
    pub(crate) max_retries: u32,
    pub(crate) max_elapsed: Duration,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    pub(crate) max_retry_after: Duration,
    pub(crate) retry_server_errors: bool,
    pub(crate) buffer_limit: usize,
    pub(crate) bases: Vec<Url>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            max_retries: 10,
            max_elapsed: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
            retry_server_errors: true,
            buffer_limit: 4 * 1024 * 1024,
            bases: Vec::new(),
        }
    }
}

impl Policy {
    /// The methods that get a fresh key when the request has none. Defaults to `POST` and
    /// `PATCH`.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Retries after the first attempt, at most. Defaults to 10.
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The time from the first attempt after which no attempt starts and none runs on: each
    /// attempt's timeout is cut to what is left. Defaults to 60 s.
    #[must_use]
    pub fn max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
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

    /// How much of an answer's body is read before the answer is handed on, so that an
    /// answer cut off within it is retried. A longer body is handed on as it arrives, and a
    /// cut after this point reaches the caller as a body error. Defaults to 4 MiB.
    #[must_use]
    pub fn buffer_limit(mut self, bytes: usize) -> Self {
        self.buffer_limit = bytes;
        self
    }

    /// Keys and retries only requests under `base` (same scheme, host and port; its path
    /// as a prefix, segment by segment); called again, under any of them. Requests
    /// elsewhere pass through untouched: no key, no retry. Defaults to every URL.
    #[must_use]
    pub fn limit_to(mut self, base: Url) -> Self {
        self.bases.push(base);
        self
    }

    /// Whether the policy applies to a request for `url`.
    pub(crate) fn covers(&self, url: &Url) -> bool {
        self.bases.is_empty() || self.bases.iter().any(|base| under(base, url))
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
            .fold(Policy::default(), |p, b| p.limit_to(b.parse().unwrap()));
        policy.covers(&url.parse().unwrap())
    }

    #[test]
    fn with_no_base_every_url_is_covered() {
        assert!(covers(&[], "http://anywhere.example/x"));
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
