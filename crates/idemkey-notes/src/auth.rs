//! Bearer tokens to actors, outside the idempotency layer (its scope needs the actor).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use idemkey_tower::Actor;

use crate::problems;

/// The notes service's bearer tokens: each secret and the actor it authenticates. Every front
/// end of the notes authenticates with it.
#[derive(Clone, Debug, Default)]
pub struct Tokens(Arc<HashMap<String, String>>);

impl Tokens {
    /// The tokens of `pairs`, each `(actor, secret)`.
    pub fn new(pairs: &[(String, String)]) -> Self {
        let map = pairs
            .iter()
            .map(|(actor, secret)| (secret.clone(), actor.clone()))
            .collect();
        Self(Arc::new(map))
    }

    /// The actor a request's `Authorization` value (`Bearer SECRET`) authenticates, if any.
    pub fn actor(&self, authorization: Option<&str>) -> Option<Actor> {
        let (scheme, secret) = authorization?.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.0
            .get(secret.trim())
            .map(|actor| Actor::new(actor.clone()))
    }
}

/// Puts the [`Actor`] in the request, or answers 401.
pub(crate) async fn authenticate(
    State(tokens): State<Tokens>,
    mut request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match tokens.actor(authorization) {
        Some(actor) => {
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        None => problems::unauthorized(),
    }
}
