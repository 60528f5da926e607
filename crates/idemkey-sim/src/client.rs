//! Clients: each sends requests under its actor's keys and retries each until it is answered,
//! with the same key and body, on 409, 5xx and timeouts.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use http_body_util::BodyExt;
use idemkey_tower::{Actor, IDEMPOTENT_REPLAYED};
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::history::{Answer, Event};
use crate::world::World;

/// An application instance: the idempotency layer around the handler.
pub(crate) type Instance = BoxCloneSyncService<Request<Body>, Response<Body>, Infallible>;

/// One request a client means to make: a key, and which of the key's two bodies.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Intent {
    pub(crate) actor: u8,
    pub(crate) key: u8,
    /// The second body: the key reused for a different request.
    pub(crate) other_body: bool,
}

impl Intent {
    fn body(self) -> String {
        let amount = 100 * u32::from(self.actor) + u32::from(self.key);
        let amount = if self.other_body { amount + 1 } else { amount };
        format!(r#"{{"amount":{amount}}}"#)
    }
}

pub(crate) fn actor_name(actor: u8) -> String {
    format!("a{actor}")
}

pub(crate) fn key_name(key: u8) -> String {
    format!("k{key}")
}

/// One client of `actor`: `rounds` requests, each retried until answered or out of attempts.
pub(crate) async fn client(world: Arc<World>, instances: Arc<[Instance]>, actor: u8) {
    let config = &world.config;
    for _ in 0..config.rounds {
        let key = world.draw(0..u64::from(config.keys_per_actor)) as u8;
        // A client that reuses a key for another request does so rarely: it must get 422.
        let other_body = world.chance(0.1);
        let intent = Intent {
            actor,
            key,
            other_body,
        };
        for _ in 0..config.max_attempts {
            match send(&world, &instances, intent).await {
                Some(status) if status < 500 && status != 409 => break,
                _ => pause(&world, Duration::from_secs(40)).await,
            }
        }
        pause(&world, Duration::from_secs(60)).await;
    }
}

async fn pause(world: &World, up_to: Duration) {
    tokio::time::sleep(world.duration(Duration::ZERO, up_to)).await;
}

/// Sends one attempt to an instance the seed picks; its status, or `None` on timeout.
pub(crate) async fn send(world: &World, instances: &[Instance], intent: Intent) -> Option<u16> {
    let attempt = world.next_attempt();
    let instance = world.draw(0..instances.len() as u64) as usize;
    let body = intent.body();
    world.log(Event::Request {
        attempt,
        actor: intent.actor,
        key: intent.key,
        body: body.clone(),
        instance: instance as u8,
        healing: world.healing(),
    });
    let mut request = Request::post("/v1/payments")
        .header("idempotency-key", key_name(intent.key))
        .header("x-request-id", attempt.to_string())
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("a valid request");
    request
        .extensions_mut()
        .insert(Actor::new(actor_name(intent.actor)));
    let limit = world.config.client_timeout;
    let timeout = world.duration(limit / 10, limit);
    let call = instances[instance].clone().oneshot(request);
    let Ok(Ok(response)) = tokio::time::timeout(timeout, call).await else {
        world.log(Event::Timeout { attempt });
        return None;
    };
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|value| value == "true");
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let answer = Answer {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    };
    world.log(Event::Response {
        attempt,
        answer,
        replayed,
    });
    Some(status)
}
