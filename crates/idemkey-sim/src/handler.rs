//! The application's handler: reads its derived key, makes one external effect with it, and
//! answers with what the effect was; the seed decides whether it is paused, killed or fails.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use idemkey_core::Claim;
use idemkey_tower::{Actor, Keys};

use crate::history::{Event, Exec};
use crate::world::{Executor, World, ms};

/// What becomes of one execution, decided when it starts.
#[derive(Clone, Copy, Debug, Default)]
struct Fate {
    pause_before: Option<Duration>,
    pause_after: Option<Duration>,
    kill_before: bool,
    kill_after: bool,
    fail: bool,
}

/// What the handler answers: enough to tell whose request it was and which effect it made.
pub(crate) fn body(actor: &str, key: &str, request: &str, effect: u64) -> String {
    serde_json::json!({ "actor": actor, "key": key, "request": request, "effect": effect })
        .to_string()
}

/// The handler, as a service for the layer.
pub(crate) async fn handle(
    world: Arc<World>,
    request: Request<Body>,
) -> Result<Response<Body>, Infallible> {
    let (parts, sent) = request.into_parts();
    let (Some(claim), Some(keys), Some(actor)) = (
        parts.extensions.get::<Claim>(),
        Keys::from_extensions(&parts.extensions),
        parts.extensions.get::<Actor>(),
    ) else {
        // The layer always provides them; without them there is nothing to do but say so.
        return Ok(status(StatusCode::INTERNAL_SERVER_ERROR, "no claim"));
    };
    let exec = world.exec_of(claim);
    let key = claim.scope.key.as_str().to_owned();
    let request = sent
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let request = String::from_utf8_lossy(&request).into_owned();
    let fate = fate(&world);
    world.set_executor(exec, Executor::Running);
    world.log(Event::HandlerStart {
        exec,
        fate: format!("{fate:?}"),
    });
    work(&world).await;
    step(&world, exec, fate.pause_before, fate.kill_before).await;
    // The claim on disk before the key leaves (the memory store's is at once).
    let Ok(keys) = keys.get().await else {
        return Ok(status(StatusCode::SERVICE_UNAVAILABLE, "claim not durable"));
    };
    let (effect, fresh) = world.external.call(&keys.key("effect"), exec.record);
    world.log(Event::Effect {
        exec,
        effect: effect.id,
        fresh,
    });
    work(&world).await;
    step(&world, exec, fate.pause_after, fate.kill_after).await;
    world.set_executor(exec, Executor::Finished);
    let (code, text) = if fate.fail {
        (StatusCode::SERVICE_UNAVAILABLE, "try again".to_owned())
    } else {
        (
            StatusCode::CREATED,
            body(actor.as_str(), &key, &request, effect.id),
        )
    };
    world.log(Event::HandlerEnd {
        exec,
        status: code.as_u16(),
    });
    Ok(status(code, text))
}

fn status(code: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(Body::from(body.into()));
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().expect("valid"),
    );
    response
}

fn fate(world: &World) -> Fate {
    let fates = &world.config.fates;
    let pause = |world: &World| {
        world
            .chance(fates.pause / 2.0)
            .then(|| world.duration(world.config.lease / 2, fates.max_pause))
    };
    Fate {
        pause_before: pause(world),
        pause_after: pause(world),
        kill_before: world.chance(fates.kill_before),
        kill_after: world.chance(fates.kill_after),
        fail: world.chance(fates.fail),
    }
}

/// The handler's own work: a short, seeded while.
async fn work(world: &World) {
    let took = world.duration(Duration::ZERO, Duration::from_secs(2));
    tokio::time::sleep(took).await;
}

/// A pause (the executor's process frozen, heartbeat included), then maybe death.
async fn step(world: &World, exec: Exec, pause: Option<Duration>, kill: bool) {
    if let Some(pause) = pause {
        let until_ms = world.clock.elapsed_ms() + ms(pause);
        world.set_executor(exec, Executor::Paused { until_ms });
        world.log(Event::Paused { exec, until_ms });
        tokio::time::sleep(pause).await;
        world.set_executor(exec, Executor::Running);
    }
    if kill {
        world.set_executor(exec, Executor::Dead);
        world.log(Event::Killed { exec });
        // A killed process does nothing more: its task waits forever, its heartbeat's calls
        // never reach the store (see `SimStore::gate`), and the runtime drops both at the end.
        std::future::pending::<()>().await;
    }
}
