//! Bearer tokens to actors, outside the idempotency layer (its scope needs the actor).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use idemkey_tower::Actor;

use crate::problems;

/// The secrets and the actor each one authenticates.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tokens(Arc<HashMap<String, String>>);

impl Tokens {
    pub(crate) fn new(pairs: &[(String, String)]) -> Self {
        let map = pairs
            .iter()
            .map(|(actor, secret)| (secret.clone(), actor.clone()))
            .collect();
        Self(Arc::new(map))
    }

    fn actor(&self, request: &Request) -> Option<Actor> {
        let value = request
            .headers()
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        let (scheme, secret) = value.split_once(' ')?;
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
    match tokens.actor(&request) {
        Some(actor) => {
            request.extensions_mut().insert(actor);
            next.run(request).await
        }
        None => problems::unauthorized(),
    }
}
