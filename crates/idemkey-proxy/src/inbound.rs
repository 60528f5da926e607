//! What the proxy admits of a request before any route sees it: one plain host, so that the
//! forwarding headers name what the proxy saw and nothing a client made up.

use axum::body::Body;
use http::Request;
use http::header::HOST;

use crate::host;

/// `request` with its host as its one `Host` header (HTTP/2's `:authority` included), or
/// why it is refused (400 `bad-target`): its host is missing, doubled or malformed.
pub(crate) fn admit(mut request: Request<Body>) -> Result<Request<Body>, &'static str> {
    let seen = host::seen(&request).map_err(host::BadHost::detail)?;
    let headers = request.headers_mut();
    headers.remove(HOST);
    if let Some(host) = seen {
        headers.insert(HOST, host);
    }
    Ok(request)
}
