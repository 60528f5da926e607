//! What to check and how: [`CheckConfig`].

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::{CaseId, Error, Result};

/// Headers the checker writes itself; a user header must not override them.
const RESERVED: [&str; 4] = [
    "idempotency-key",
    "content-length",
    "host",
    "transfer-encoding",
];

/// The target API and the inputs of a check.
///
/// Build it with [`CheckConfig::new`] and the builder methods; [`Checker::new`](crate::Checker::new)
/// validates it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CheckConfig {
    /// The create endpoint, called with `POST` (`http://` only).
    pub create_url: Url,
    /// A valid create request body (JSON).
    pub body: String,
    /// Another valid body, different from [`body`](Self::body), for the mismatch case.
    pub alt_body: String,
    /// Headers sent on every request as the first actor (typically `Authorization`).
    pub headers: HeaderMap,
    /// Headers of a second actor; enables the cross-actor case.
    pub actor2_headers: Option<HeaderMap>,
    /// A `GET` endpoint listing the first actor's resources, used to count them.
    pub list_url: Option<Url>,
    /// A body the API rejects, for the failure-not-stored case.
    pub invalid_body: Option<String>,
    /// Size of the concurrent burst. Defaults to 32.
    pub concurrency: usize,
    /// Bound on every request (connect, send, read). Defaults to 10 s.
    pub timeout: Duration,
    /// The cases to run, in order. Defaults to [`CaseId::ALL`].
    pub cases: Vec<CaseId>,
}

impl CheckConfig {
    /// A configuration for the create endpoint `create_url` with a valid `body` and a different
    /// valid `alt_body`; everything else at its default.
    pub fn new(
        create_url: &str,
        body: impl Into<String>,
        alt_body: impl Into<String>,
    ) -> Result<Self> {
        Ok(Self {
            create_url: parse_url(create_url)?,
            body: body.into(),
            alt_body: alt_body.into(),
            headers: HeaderMap::new(),
            actor2_headers: None,
            list_url: None,
            invalid_body: None,
            concurrency: 32,
            timeout: Duration::from_secs(10),
            cases: CaseId::ALL.to_vec(),
        })
    }

    /// Adds a first-actor header given as `Name: value`.
    pub fn header(mut self, line: &str) -> Result<Self> {
        let (name, value) = parse_header(line)?;
        self.headers.append(name, value);
        Ok(self)
    }

    /// Adds a second-actor header given as `Name: value` (enables the cross-actor case).
    pub fn actor2_header(mut self, line: &str) -> Result<Self> {
        let (name, value) = parse_header(line)?;
        self.actor2_headers
            .get_or_insert_with(HeaderMap::new)
            .append(name, value);
        Ok(self)
    }

    /// Sets the list endpoint; a relative reference (`/v1/notes`) is resolved against the create URL.
    pub fn list_url(mut self, url: &str) -> Result<Self> {
        let joined = self
            .create_url
            .join(url)
            .map_err(|e| invalid_url(url, &e.to_string()))?;
        self.list_url = Some(check_http(url, joined)?);
        Ok(self)
    }

    /// Sets a body the API rejects (enables the failure-not-stored case).
    #[must_use]
    pub fn invalid_body(mut self, body: impl Into<String>) -> Self {
        self.invalid_body = Some(body.into());
        self
    }

    /// Sets the size of the concurrent burst.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Sets the bound on every request.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Restricts the run to `cases` (in the order given).
    #[must_use]
    pub fn cases(mut self, cases: impl IntoIterator<Item = CaseId>) -> Self {
        self.cases = cases.into_iter().collect();
        self
    }

    /// Checks what the builder cannot: JSON bodies, distinct bodies, sane numbers.
    pub(crate) fn validate(&self) -> Result<()> {
        check_http(self.create_url.as_str(), self.create_url.clone())?;
        let body = parse_json("--body", &self.body)?;
        let alt = parse_json("--alt-body", &self.alt_body)?;
        if body == alt {
            return Err(Error::InvalidConfig(
                "--alt-body must differ from --body".into(),
            ));
        }
        if let Some(invalid) = &self.invalid_body {
            parse_json("--invalid-body", invalid)?;
        }
        if self.concurrency < 2 {
            return Err(Error::InvalidConfig(
                "--concurrency must be at least 2".into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::InvalidConfig("the timeout must be positive".into()));
        }
        Ok(())
    }
}

/// Parses a `Name: value` header line.
pub fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue)> {
    let invalid = |reason: &str| Error::InvalidHeader {
        line: line.into(),
        reason: reason.into(),
    };
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| invalid("expected \"Name: value\""))?;
    let name = HeaderName::try_from(name.trim()).map_err(|_| invalid("bad header name"))?;
    if RESERVED.contains(&name.as_str()) {
        return Err(invalid("the checker sets this header itself"));
    }
    let value = HeaderValue::try_from(value.trim()).map_err(|_| invalid("bad header value"))?;
    Ok((name, value))
}

fn parse_url(url: &str) -> Result<Url> {
    let parsed = Url::parse(url).map_err(|e| invalid_url(url, &e.to_string()))?;
    check_http(url, parsed)
}

fn check_http(given: &str, url: Url) -> Result<Url> {
    if url.scheme() != "http" {
        return Err(invalid_url(given, "only http:// URLs are supported"));
    }
    if url.host_str().is_none() {
        return Err(invalid_url(given, "missing host"));
    }
    Ok(url)
}

fn invalid_url(url: &str, reason: &str) -> Error {
    Error::InvalidUrl {
        url: url.into(),
        reason: reason.into(),
    }
}

fn parse_json(which: &'static str, text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|source| Error::InvalidJson { which, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CheckConfig {
        CheckConfig::new("http://127.0.0.1:1/v1/notes", r#"{"a":1}"#, r#"{"a":2}"#).unwrap()
    }

    #[test]
    fn header_lines_parse_or_fail_clearly() {
        let (name, value) = parse_header("Authorization:  Bearer x ").unwrap();
        assert_eq!(
            (name.as_str(), value.to_str().unwrap()),
            ("authorization", "Bearer x")
        );
        assert!(parse_header("no colon").is_err());
        assert!(parse_header("bad name: x").is_err());
        assert!(parse_header("Idempotency-Key: k").is_err());
    }

    #[test]
    fn urls_must_be_http() {
        assert!(CheckConfig::new("https://example.com/", "{}", "[]").is_err());
        assert!(CheckConfig::new("not a url", "{}", "[]").is_err());
        let list = config().list_url("/v1/notes").unwrap().list_url.unwrap();
        assert_eq!(list.as_str(), "http://127.0.0.1:1/v1/notes");
    }

    #[test]
    fn validation_rejects_bad_bodies() {
        assert!(config().validate().is_ok());
        let mut same = config();
        same.alt_body = r#"{ "a" : 1 }"#.into();
        assert!(matches!(same.validate(), Err(Error::InvalidConfig(_))));
        let mut bad = config();
        bad.body = "{".into();
        assert!(matches!(
            bad.validate(),
            Err(Error::InvalidJson {
                which: "--body",
                ..
            })
        ));
        assert!(config().invalid_body("nope").validate().is_err());
        assert!(config().concurrency(1).validate().is_err());
    }
}
