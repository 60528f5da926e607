//! What the proxy admits of a request before any route sees it: one plain host, so that the
//! forwarding headers name what the proxy saw and nothing a client made up, and a
//! normalised path, so that a route matches every spelling of its path and no path leaves
//! the upstream's base.

use axum::body::Body;
use axum::extract::OriginalUri;
use http::header::HOST;
use http::uri::PathAndQuery;
use http::{Request, Uri};

use crate::{host, path};

/// `request` with its host as its one `Host` header (HTTP/2's `:authority` included) and its
/// path normalised, or why it is refused (400 `bad-target`): its host is missing, doubled or
/// malformed, or its path cannot be normalised safely.
pub(crate) fn admit(mut request: Request<Body>) -> Result<Request<Body>, &'static str> {
    let seen = host::seen(&request).map_err(host::BadHost::detail)?;
    let uri = normalised(request.uri())?;
    // The layer fingerprints the URI the router noted as sent: the normalised one, so that
    // a retry spelled otherwise is the same request.
    if let Some(original) = request.extensions_mut().get_mut::<OriginalUri>() {
        original.0 = uri.clone();
    }
    *request.uri_mut() = uri;
    let headers = request.headers_mut();
    headers.remove(HOST);
    if let Some(host) = seen {
        headers.insert(HOST, host);
    }
    Ok(request)
}

/// `uri` with its path normalised; its query as sent.
fn normalised(uri: &Uri) -> Result<Uri, &'static str> {
    let path = path::normalise(uri.path()).map_err(path::BadPath::detail)?;
    let target = match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    // Never fails: decoding only gives unreserved characters, valid anywhere in a path.
    let unforwardable = |_| "the path and query cannot be forwarded";
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(PathAndQuery::try_from(target).map_err(unforwardable)?);
    Uri::from_parts(parts).map_err(|_| "the path and query cannot be forwarded")
}
