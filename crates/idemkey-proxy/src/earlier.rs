//! Before a covered request reaches its route: the actor key is loaded, and, with
//! `earlier_digests`, a record that an earlier version of the proxy made for this request
//! under the unkeyed actor digest is found, so that its retry replays instead of executing a
//! second time. Such records expire with the retention; until then, with the setting on,
//! each keyed request costs one more lookup.

use axum::body::Body;
use http::{Request, Response};
use idemkey_core::{Key, Scope, Store};
use idemkey_tower::{IDEMPOTENCY_KEY, store_unavailable};

use crate::actor::{EarlierActor, ProxyActor};
use crate::routes::operation_of;

/// Readies `request` for the actor maker: the key set, and (with `earlier_digests`) the
/// earlier actor noted when the store holds a record of this credential, operation and key
/// under it. A store that cannot answer is 503 `store-unavailable`, the request not
/// executed, as the layer would answer.
pub(crate) async fn ready<S: Store>(
    store: &S,
    actor: &ProxyActor,
    request: &mut Request<Body>,
) -> Result<(), Response<Body>> {
    if !actor.key.is_set() {
        let secret = store.secret().await.map_err(|error| unavailable(&error))?;
        actor.key.set_from(&secret);
    }
    if !actor.earlier {
        return Ok(());
    }
    let Some(key) = request
        .headers()
        .get(IDEMPOTENCY_KEY)
        .and_then(|value| Key::parse(value.as_bytes()).ok())
    else {
        return Ok(());
    };
    let (parts, body) = std::mem::take(request).into_parts();
    let earlier = actor.unkeyed(&parts);
    let operation = operation_of(&parts);
    *request = Request::from_parts(parts, body);
    if let Some(earlier) = earlier {
        let scope = Scope::new(earlier.clone(), &operation, key);
        if store
            .lookup(&scope)
            .await
            .map_err(|error| unavailable(&error))?
            .is_some()
        {
            request.extensions_mut().insert(EarlierActor(earlier));
        }
    }
    Ok(())
}

fn unavailable(error: &idemkey_core::Error) -> Response<Body> {
    tracing::warn!(%error, "the store could not ready the actor; the request was not executed");
    store_unavailable()
}
