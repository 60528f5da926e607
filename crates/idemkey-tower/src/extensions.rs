//! The types the layer exchanges with the rest of the application through extensions.

/// The authenticated owner of what a request creates (tenant, account): part of the scope.
///
/// The application's authentication layer, which runs *outside* the idempotency layer,
/// inserts it into the request extensions. A request that carries a key but no `Actor` is
/// answered 401: keys are never scoped globally (behaviour [§3](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#3-scope), [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
///
/// ```
/// use idemkey_tower::Actor; // `idemkey::Actor` with the facade
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Actor::new("tenant-42"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Actor(pub String);

impl Actor {
    /// An actor with this stable id.
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The actor's id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A response extension by which a handler reports that it did nothing: a rejection decided
/// before execution, such as a validation error (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored)).
///
/// The layer then does not store the response. If this request created the record, the
/// record is deleted, so the same key may be sent again with a corrected request. If the
/// record already had an attempt behind it (released after a 5xx, or taken over), it is only
/// released: that attempt may have had effects under the record's derived keys, which a new
/// record would not share. Without the marker a 4xx is stored by the default
/// [`StatusPolicy`](idemkey_core::StatusPolicy).
///
/// ```
/// use axum::{Extension, http::StatusCode, response::IntoResponse};
/// use idemkey_tower::NotExecuted; // `idemkey::NotExecuted` with the facade
///
/// async fn handler() -> impl IntoResponse {
///     (StatusCode::BAD_REQUEST, Extension(NotExecuted), "title is required")
/// }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotExecuted;
