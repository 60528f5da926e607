//! The upstream: the API the proxy puts idempotency keys in front of, named by an `http://`
//! URL with an optional base path.

use http::Uri;

use crate::error::{Error, Result};

/// The upstream's address: `http://HOST:PORT` and an optional base path.
#[derive(Clone, Debug)]
pub struct Upstream {
    authority: http::uri::Authority,
    base: String,
}

impl Upstream {
    /// Parses the upstream's URL; only `http://` (a proxy in front of a local or internal
    /// service), without a query or credentials. Errors show the URL with any password
    /// masked, since they are printed.
    pub fn parse(url: &str) -> Result<Self> {
        let shown = idemkey_server::redact(url);
        let uri: Uri = url.parse().map_err(|source| Error::UpstreamUrl {
            url: shown.clone(),
            source,
        })?;
        if uri.scheme_str() != Some("http") {
            return Err(Error::UpstreamScheme(shown));
        }
        if uri.query().is_some() {
            return Err(Error::UpstreamQuery(shown));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| Error::UpstreamHost(shown.clone()))?;
        // The proxy would not send them, and the URL is printed at start-up.
        if authority.as_str().contains('@') {
            return Err(Error::UpstreamUserinfo(shown));
        }
        let base = uri.path().trim_end_matches('/').to_owned();
        Ok(Self { authority, base })
    }

    /// The upstream's URI for a request sent to the proxy at `sent`.
    pub(crate) fn uri(&self, sent: &Uri) -> Result<Uri, http::Error> {
        let path = sent.path_and_query().map_or("/", |p| p.as_str());
        Uri::builder()
            .scheme("http")
            .authority(self.authority.clone())
            .path_and_query(format!("{}{path}", self.base))
            .build()
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked_and_joined() {
        let upstream = Upstream::parse("http://127.0.0.1:9000/api/").unwrap();
        let sent: Uri = "/v1/x?a=1".parse().unwrap();
        assert_eq!(
            upstream.uri(&sent).unwrap(),
            "http://127.0.0.1:9000/api/v1/x?a=1"
        );
        for bad in ["https://x", "127.0.0.1:9000", "http://x/?q=1", "ftp://x"] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_upstream_with_userinfo_is_refused_without_its_password() {
        for url in [
            "http://user:s3cret@127.0.0.1:9000/api",
            "http://user@127.0.0.1:9000",
            "https://user:s3cret@127.0.0.1:9000",
        ] {
            let message = Upstream::parse(url).unwrap_err().to_string();
            assert!(!message.contains("s3cret"), "{message}");
        }
        let message = Upstream::parse("http://user:s3cret@127.0.0.1:9000")
            .unwrap_err()
            .to_string();
        assert!(message.contains("user"), "{message}");
    }
}
