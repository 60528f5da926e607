//! Bearer tokens to actors, outside the idempotency middleware (its scope needs the actor).

use std::collections::HashMap;

use actix_web::HttpMessage;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use idemkey_actix::problem_response;
use idemkey_notes::Tokens;

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

/// Puts the [`Actor`](idemkey_actix::Actor) in the request, or answers 401 `unauthorized`.
pub(crate) async fn authenticate(
    tokens: Tokens,
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let authorization = request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    match tokens.actor(authorization) {
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
