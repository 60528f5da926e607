//! Bearer tokens to actors, outside the idempotency middleware (its scope needs the actor).

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::HttpMessage;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use idemkey_actix::{Actor, problem_response};

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

    fn actor(&self, request: &ServiceRequest) -> Option<Actor> {
        let value = request
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)?
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

/// Refuses two actors with one secret: one actor's clients would act in the other's scope.
pub(crate) fn refuse_shared_secrets(tokens: &[(String, String)]) -> anyhow::Result<()> {
    let mut owners = HashMap::new();
    for (actor, secret) in tokens {
        if let Some(other) = owners.insert(secret, actor).filter(|other| *other != actor) {
            anyhow::bail!(
                "actors {other:?} and {actor:?} are given the same token secret: each actor needs \
                 its own"
            );
        }
    }
    Ok(())
}

/// Puts the [`Actor`] in the request, or answers 401 `unauthorized`.
pub(crate) async fn authenticate(
    tokens: Tokens,
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    match tokens.actor(&request) {
        Some(actor) => {
            request.extensions_mut().insert(actor);
            Ok(next.call(request).await?.map_into_boxed_body())
        }
        None => {
            let mut response = problem_response(&idemkey_notes::unauthorized_problem());
            response.headers_mut().insert(
                actix_web::http::header::WWW_AUTHENTICATE,
                actix_web::http::header::HeaderValue::from_static("Bearer"),
            );
            Ok(request.into_response(response))
        }
    }
}
