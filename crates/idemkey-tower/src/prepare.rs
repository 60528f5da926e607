//! The first step of both modes: key, actor, limited body and fingerprint.

use crate::Body;
#[cfg(feature = "axum")]
use axum::extract::{MatchedPath, OriginalUri};
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, request::Parts};
use http_body::Body as HttpBody;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemkey_core::fingerprint::is_json_media_type;
use idemkey_core::{BoxError, ClaimRequest, Fingerprint, Key, Problem, ProblemKind};

use crate::Config;

/// The outcome of a keyed request without an actor, which the layers also log once.
pub(crate) const UNAUTHENTICATED: &str = "unauthenticated";

/// What [`prepare`] made of a request.
#[derive(Debug)]
pub enum Preparation<B> {
    /// Not for this layer: the key is not honoured on this method, or the request reached
    /// no route (axum's fallback). Run it as if the layer were absent.
    PassThrough(Request<B>),
    /// The key is optional and absent: run the request unrecorded (in atomic mode, still
    /// in one transaction that commits by the status policy).
    Unrecorded(Request<B>),
    /// Rejected before execution; nothing was stored.
    Rejected(Rejection),
    /// Ready to be claimed.
    Ready(Box<Prepared>),
}

/// A rejection decided before execution.
#[derive(Clone, Debug)]
pub struct Rejection {
    /// The outcome, as counted in metrics and traces (`key_invalid`).
    pub outcome: &'static str,
    /// The problem to answer with.
    pub problem: Problem,
}

/// A request with a valid key and actor, its body buffered, and what to ask the store.
#[derive(Debug)]
pub struct Prepared {
    /// The request's head.
    pub parts: Parts,
    /// The request's body, read whole within the limit.
    pub body: Bytes,
    /// Scope, operation, fingerprint, lease, retention and request id.
    pub claim: ClaimRequest,
}

impl Prepared {
    /// The request rebuilt with its buffered body, for the handler.
    pub fn into_request(self) -> Request<Body> {
        Request::from_parts(self.parts, Body::from(self.body))
    }
}

/// Parses the key, finds the actor, reads the body within the limit and fingerprints the
/// request (behaviour [§2](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#2-the-key), [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)).
pub async fn prepare<B>(request: Request<B>, config: &Config) -> Preparation<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if !config.honours(request.method()) || reached_no_route(&request) {
        return Preparation::PassThrough(request);
    }
    let key = match parse_key(request.headers(), &config.key_header) {
        Ok(Some(key)) => key,
        Ok(None) if !config.require_key => return Preparation::Unrecorded(request),
        Ok(None) => return reject("key_missing", Problem::new(ProblemKind::KeyMissing)),
        Err(problem) => return reject("key_invalid", problem),
    };
    let (parts, body) = request.into_parts();
    let Some(actor) = config.actor.make_actor(&parts) else {
        return reject(UNAUTHENTICATED, unauthenticated());
    };
    let body = match read_body(body, config.request_body_limit).await {
        Ok(body) => body,
        Err(rejection) => return Preparation::Rejected(rejection),
    };
    let operation = config.operation.make_operation(&parts);
    let fingerprint = fingerprint(&parts, &body, config);
    let mut claim = ClaimRequest::new(actor, operation, key, fingerprint)
        .lease(config.lease)
        .retention(config.retention);
    if let Some(id) = parts
        .headers
        .get(&config.request_id_header)
        .and_then(|value| value.to_str().ok())
    {
        // Bounded: the record keeps it for the whole retention.
        claim = claim.request_id(id);
    }
    Preparation::Ready(Box::new(Prepared { parts, body, claim }))
}

/// Whether axum routed the request to no route: its router marks every request it routes
/// with [`OriginalUri`] and, when a route matches, with [`MatchedPath`]; its fallback (a
/// 404, or the application's own) gets no `MatchedPath`. A service mounted with
/// `nest_service` gets none either, but sees its path with the prefix stripped, so only an
/// unstripped URI counts. Outside an axum router neither is set, and the request is taken
/// to reach a handler.
#[cfg(feature = "axum")]
fn reached_no_route<B>(request: &Request<B>) -> bool {
    let extensions = request.extensions();
    extensions.get::<MatchedPath>().is_none()
        && extensions
            .get::<OriginalUri>()
            .is_some_and(|original| original.0 == *request.uri())
}

/// Without axum there is no router to have routed it: every request reaches the service.
#[cfg(not(feature = "axum"))]
fn reached_no_route<B>(_: &Request<B>) -> bool {
    false
}

/// The URI the client sent: a router nested in another sees its path without the prefix
/// (`/notes` for `/orgs/a/notes`), while [`OriginalUri`] keeps the whole of it.
#[cfg(feature = "axum")]
pub(crate) fn client_uri(parts: &Parts) -> &http::Uri {
    parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |original| &original.0)
}

/// The URI the client sent: without axum, the request's own.
#[cfg(not(feature = "axum"))]
pub(crate) fn client_uri(parts: &Parts) -> &http::Uri {
    &parts.uri
}

/// Whether the request declares a JSON body (`application/json`, `+json`).
fn is_json(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| is_json_media_type(&media.trim().to_ascii_lowercase()))
}

fn reject<B>(outcome: &'static str, problem: Problem) -> Preparation<B> {
    Preparation::Rejected(Rejection { outcome, problem })
}

fn parse_key(headers: &http::HeaderMap, name: &http::HeaderName) -> Result<Option<Key>, Problem> {
    let values = headers.get_all(name).into_iter();
    Key::from_header_values(values.map(|value| value.as_bytes()))
        .map_err(|err| Problem::new(ProblemKind::KeyInvalid).detail(err.to_string()))
}

fn unauthenticated() -> Problem {
    Problem::new(ProblemKind::Unauthenticated)
        .detail("a request with an Idempotency-Key must come from an authenticated actor")
}

async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, Rejection>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<LengthLimitError>() => Err(Rejection {
            outcome: "payload_too_large",
            problem: Problem::new(ProblemKind::PayloadTooLarge)
                .detail(format!("the request body is over {limit} bytes")),
        }),
        Err(_) => Err(Rejection {
            outcome: "body_unreadable",
            problem: Problem::new(ProblemKind::BodyUnreadable),
        }),
    }
}

/// The request's fingerprint: method, raw path and query as the client sent them (before a
/// nesting router strips its prefix), media type, body, declared headers.
pub fn fingerprint(parts: &Parts, body: &[u8], config: &Config) -> Fingerprint {
    let uri = client_uri(parts);
    let mut builder = Fingerprint::builder(parts.method.as_str(), uri.path()).query(uri.query());
    if let Some(value) = parts.headers.get(CONTENT_TYPE) {
        builder = match value.to_str() {
            Ok(text) => builder.content_type(text),
            // Not text, so no media type: keep the raw bytes so requests still differ.
            Err(_) => builder.header("content-type", value.as_bytes()),
        };
    }
    for name in &config.fingerprint_headers {
        for value in parts.headers.get_all(name) {
            builder = builder.header(name.as_str(), value.as_bytes());
        }
    }
    // The builder hashes a JSON body canonically, so the selection only matters for JSON.
    match is_json(parts)
        .then(|| config.fingerprint_json.select(body))
        .flatten()
    {
        Some(selected) => builder.body(&selected),
        None => builder.body(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Actor;

    fn request(key: &str) -> Request<Body> {
        let mut request = Request::post("/v1/notes")
            .header("idempotency-key", key)
            .body(Body::from("{}"))
            .unwrap();
        request.extensions_mut().insert(Actor::new("a"));
        request
    }

    #[tokio::test]
    async fn a_long_request_id_is_cut_before_it_is_stored() {
        let mut long = request("k");
        let id = "r".repeat(400_000);
        long.headers_mut()
            .insert("x-request-id", id.parse().unwrap());
        let Preparation::Ready(prepared) = prepare(long, &Config::default()).await else {
            panic!("should be ready")
        };
        let kept = prepared.claim.request_id.unwrap();
        assert_eq!(kept.len(), idemkey_core::MAX_REQUEST_ID_LEN);
        assert!(id.starts_with(&kept));
    }

    #[tokio::test]
    async fn quoted_and_bare_keys_prepare_the_same_claim() {
        let config = Config::default();
        let (Preparation::Ready(a), Preparation::Ready(b)) = (
            prepare(request("\"k\""), &config).await,
            prepare(request("k"), &config).await,
        ) else {
            panic!("both should be ready")
        };
        assert_eq!(a.claim.scope, b.claim.scope);
        assert_eq!(a.claim.fingerprint, b.claim.fingerprint);
        assert_eq!(a.claim.operation.to_string(), "POST /v1/notes:v1");
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_request_routed_to_no_route_passes_through() {
        let mut unrouted = request("k");
        let uri = unrouted.uri().clone();
        unrouted.extensions_mut().insert(OriginalUri(uri));
        let prepared = prepare(unrouted, &Config::default()).await;
        assert!(matches!(prepared, Preparation::PassThrough(_)));
        // A stripped URI is a service mounted with `nest_service`: a handler.
        let mut mounted = request("k");
        let original = "/api/v1/notes".parse().unwrap();
        mounted.extensions_mut().insert(OriginalUri(original));
        let prepared = prepare(mounted, &Config::default()).await;
        assert!(matches!(prepared, Preparation::Ready(_)));
    }

    #[tokio::test]
    async fn the_key_header_and_the_actor_are_the_applications_to_choose() {
        #[derive(Clone)]
        struct Tenant(&'static str);
        let config = Config::default()
            .key_header(http::HeaderName::from_static("x-request-key"))
            .actor(|parts: &Parts| parts.extensions.get::<Tenant>().map(|t| t.0.to_owned()));
        let mut request = Request::post("/v1/notes")
            .header("x-request-key", "k")
            .body(Body::empty())
            .unwrap();
        request.extensions_mut().insert(Tenant("t-7"));
        let Preparation::Ready(prepared) = prepare(request, &config).await else {
            panic!("a key in the configured header, and an actor")
        };
        assert_eq!(prepared.claim.scope.actor, "t-7");
        // The default header is an ordinary header now; without the tenant, no actor.
        let mut other = Request::post("/v1/notes")
            .header("idempotency-key", "k")
            .body(Body::empty())
            .unwrap();
        other.extensions_mut().insert(Actor::new("a"));
        let Preparation::Rejected(missing) = prepare(other, &config).await else {
            panic!("the configured header is required")
        };
        assert_eq!(missing.outcome, "key_missing");
        let anonymous = Request::post("/v1/notes")
            .header("x-request-key", "k")
            .body(Body::empty())
            .unwrap();
        let Preparation::Rejected(anonymous) = prepare(anonymous, &config).await else {
            panic!("no tenant, no actor")
        };
        assert_eq!(anonymous.outcome, "unauthenticated");
    }

    #[tokio::test]
    async fn the_json_selection_decides_which_members_count() {
        let config = Config::default()
            .fingerprint_json(crate::JsonSelection::Exclude(vec!["/sent_at".into()]));
        let json = |body: &'static str, media: &str| {
            let mut request = Request::post("/v1/notes")
                .header("idempotency-key", "k")
                .header("content-type", media)
                .body(Body::from(body))
                .unwrap();
            request.extensions_mut().insert(Actor::new("a"));
            request
        };
        let fingerprint = |request| async {
            match prepare(request, &config).await {
                Preparation::Ready(prepared) => prepared.claim.fingerprint,
                _ => panic!("ready"),
            }
        };
        let a = fingerprint(json(r#"{"t":"x","sent_at":1}"#, "application/json")).await;
        let b = fingerprint(json(
            r#"{"sent_at":2,"t":"x"}"#,
            "application/json; charset=utf-8",
        ))
        .await;
        let c = fingerprint(json(r#"{"t":"y","sent_at":1}"#, "application/json")).await;
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Not declared JSON: the body counts whole.
        let d = fingerprint(json(r#"{"t":"x","sent_at":1}"#, "text/plain")).await;
        let e = fingerprint(json(r#"{"t":"x","sent_at":2}"#, "text/plain")).await;
        assert_ne!(d, e);
    }

    #[tokio::test]
    async fn declared_headers_count() {
        let config = Config::default().fingerprint_header(http::header::ACCEPT_LANGUAGE);
        let mut other = request("k");
        other
            .headers_mut()
            .insert("accept-language", "fr".parse().unwrap());
        let (Preparation::Ready(a), Preparation::Ready(b)) = (
            prepare(request("k"), &config).await,
            prepare(other, &config).await,
        ) else {
            panic!("both should be ready")
        };
        assert_ne!(a.claim.fingerprint, b.claim.fingerprint);
    }
}
