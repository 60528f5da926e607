//! Which requests the proxy records: each covered route gets an [`IdempotencyLayer`] of its
//! own settings over the same store and forwarder; the rest are forwarded unrecorded.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::request::Parts;
use http::{Request, Response};
use idemkey_core::{ClaimFlush, ExpiredLease, Operation, Store};
use idemkey_tower::{Config, Executions, IdempotencyLayer, OwnerHeartbeat};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

use crate::actor::ProxyActor;
use crate::config::Route;
use crate::forward::{Forward, bad_target};
use crate::{earlier, inbound};

/// What the proxy serves: one boxed service for every request, recorded or not.
pub type ProxyService = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// Settings every route shares.
pub(crate) struct Shared {
    pub(crate) actor: ProxyActor,
    pub(crate) retention: Duration,
    pub(crate) lease: Duration,
    /// The one heartbeat of every route's claims, if the proxy keeps one.
    pub(crate) owner: Option<OwnerHeartbeat>,
    pub(crate) secret: Option<Arc<[u8]>>,
    pub(crate) executions: Executions,
}

/// The operation of a proxied request: its method and normalised path (no route templates
/// are known). The version is fixed: the upstream's own versions are not visible here.
pub(crate) fn operation_of(parts: &Parts) -> Operation {
    Operation::new(format!("{} {}", parts.method, parts.uri.path()), "proxy")
}

fn config(route: &Route, shared: &Shared) -> Config {
    let mut config = Config::default()
        .methods(route.methods.clone())
        .require_key(route.require_key)
        .actor(shared.actor.clone())
        .operation(operation_of)
        .retention(shared.retention)
        .lease(shared.lease)
        // Every recorded request is forwarded as soon as it is claimed: its claim goes to
        // disk in the same step (one round trip on PostgreSQL, not a write and a flush).
        .claim_flush(ClaimFlush::OnClaim);
    if let Some(owner) = &shared.owner {
        config = config.owner_heartbeat(owner.clone());
    }
    // A claim taken over may have been forwarded already (its proxy killed mid-forward, or
    // only frozen, its forward still running): forwarding again would execute twice on an
    // upstream that does not deduplicate.
    if !route.upstream_deduplicates {
        config = config.expired_lease(ExpiredLease::PreviousAttemptUnknown);
    }
    if let Some(status) = route.mismatch_status {
        config = config.mismatch_status(status);
    }
    if let Some(bound) = route.wait_in_flight {
        config = config.wait_in_flight(bound);
    }
    for name in &route.fingerprint_headers {
        config = config.fingerprint_header(name.clone());
    }
    match &shared.secret {
        Some(secret) => config.secret(secret.clone()),
        None => config,
    }
}

/// The proxy's service: a request admitted ([`inbound::admit`]) is recorded by the first
/// route matching its method and path, or forwarded unrecorded.
pub(crate) fn service<S: Store>(
    store: &S,
    routes: &[Route],
    shared: &Shared,
    forward: Forward,
) -> ProxyService {
    let covered: Arc<Vec<(Route, ProxyService)>> = Arc::new(
        routes
            .iter()
            .map(|route| {
                let layer = IdempotencyLayer::with_config(store.clone(), config(route, shared))
                    .with_executions(shared.executions.clone());
                (
                    route.clone(),
                    BoxCloneSyncService::new(layer.layer(forward.clone())),
                )
            })
            .collect(),
    );
    let unrecorded = BoxCloneSyncService::new(forward);
    let store = store.clone();
    let actor = shared.actor.clone();
    BoxCloneSyncService::new(tower::service_fn(move |request: Request<Body>| {
        let (covered, unrecorded) = (covered.clone(), unrecorded.clone());
        let (store, actor) = (store.clone(), actor.clone());
        async move {
            let mut request = match inbound::admit(request) {
                Ok(request) => request,
                Err(why) => return Ok(bad_target(why)),
            };
            let route = covered
                .iter()
                .find(|(route, _)| route.matches(request.method(), request.uri().path()));
            let Some((_, recorded)) = route else {
                return unrecorded.oneshot(request).await;
            };
            if let Err(refused) = earlier::ready(&store, &actor, &mut request).await {
                return Ok(refused);
            }
            recorded.clone().oneshot(request).await
        }
    }))
}
