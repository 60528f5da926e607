//! Naming the operation a request performs (behaviour [§1](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#1-words-and-guarantees), [§3](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#3-scope)).

use http::request::Parts;
use idemkey_core::Operation;

/// Names the [`Operation`] of a request: part of the scope, and its version is compared
/// like the fingerprint.
///
/// Implemented by [`DefaultOperation`] and by every `Fn(&Parts) -> Operation` closure:
///
/// ```
/// // With the facade: `use idemkey::{Config, Operation};`
/// use idemkey_core::Operation;
/// use idemkey_tower::Config;
///
/// let config = Config::default()
///     .operation(|_: &http::request::Parts| Operation::new("create-note", "v1"));
/// ```
pub trait MakeOperation: Send + Sync + 'static {
    /// The operation of the request with these parts.
    fn make_operation(&self, parts: &Parts) -> Operation;
}

impl<F> MakeOperation for F
where
    F: Fn(&Parts) -> Operation + Send + Sync + 'static,
{
    fn make_operation(&self, parts: &Parts) -> Operation {
        self(parts)
    }
}

/// The default operation: `METHOD route`, where the route is axum's `MatchedPath` template
/// when present (`POST /v1/notes/{id}/comments`, prefixes of nesting routers included), else
/// the path the client sent.
///
/// Its version defaults to `v1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultOperation {
    version: String,
    compatible: Vec<String>,
}

impl DefaultOperation {
    /// Operations named `METHOD route`, at `version`.
    pub fn new(version: impl Into<String>) -> Self {
        Self {
            version: version.into(),
            compatible: Vec::new(),
        }
    }

    /// Declares records written by `version` compatible: a retry across the two versions is
    /// compared by fingerprint only.
    #[must_use]
    pub fn compatible_with(mut self, version: impl Into<String>) -> Self {
        self.compatible.push(version.into());
        self
    }
}

impl Default for DefaultOperation {
    fn default() -> Self {
        Self::new("v1")
    }
}

impl MakeOperation for DefaultOperation {
    fn make_operation(&self, parts: &Parts) -> Operation {
        let name = format!("{} {}", parts.method, route(parts));
        self.compatible
            .iter()
            .fold(Operation::new(name, self.version.clone()), |op, v| {
                op.compatible_with(v.clone())
            })
    }
}

/// The route template a front end other than axum matched the request to
/// (`/orders/{id}/refunds`), put in the request's extensions for [`DefaultOperation`] to name
/// the operation by, as it does by axum's `MatchedPath`: every path of one route is one
/// operation. idemkey-actix sets it from actix's matched pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTemplate(pub String);

/// The route a request took: axum's [`MatchedPath`](axum::extract::MatchedPath) template,
/// else a [`RouteTemplate`], else the path the client sent.
#[cfg(feature = "axum")]
fn route(parts: &Parts) -> &str {
    use axum::extract::MatchedPath;
    match parts.extensions.get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => template_or_path(parts),
    }
}

/// The route a request took: without axum's router, a [`RouteTemplate`], else the path the
/// client sent.
#[cfg(not(feature = "axum"))]
fn route(parts: &Parts) -> &str {
    template_or_path(parts)
}

fn template_or_path(parts: &Parts) -> &str {
    parts.extensions.get::<RouteTemplate>().map_or_else(
        || crate::prepare::client_uri(parts).path(),
        |template| template.0.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_is_method_and_path() {
        let (parts, ()) = http::Request::post("/v1/notes?x=1")
            .body(())
            .unwrap()
            .into_parts();
        let op = DefaultOperation::new("v2")
            .compatible_with("v1")
            .make_operation(&parts);
        assert_eq!(op.to_string(), "POST /v1/notes:v2");
        assert!(op.accepts_version("v1"));
    }

    #[test]
    fn a_route_template_names_every_path_of_its_route_alike() {
        let (mut parts, ()) = http::Request::post("/orders/7/refunds")
            .body(())
            .unwrap()
            .into_parts();
        parts
            .extensions
            .insert(RouteTemplate("/orders/{id}/refunds".to_owned()));
        let op = DefaultOperation::default().make_operation(&parts);
        assert_eq!(op.to_string(), "POST /orders/{id}/refunds:v1");
    }
}
