//! Misconfigurations the layer can only notice on a request: keyed requests without an actor,
//! a handler's `Tx` that its route's layer does not offer. Each is logged loudly once, naming
//! the likely cause; the request still gets its problem response every time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a layer logged a misconfiguration already: shared by the layer's services.
#[derive(Clone, Debug, Default)]
pub(crate) struct Noticed(Arc<AtomicBool>);

impl Noticed {
    /// True the first time only.
    pub(crate) fn first(&self) -> bool {
        first(&self.0)
    }
}

/// True the first time only, for a flag no layer holds (a process-wide one).
pub(crate) fn first(flag: &AtomicBool) -> bool {
    !flag.swap(true, Ordering::Relaxed)
}

/// A keyed request reached the layer without an actor: a client that did not authenticate,
/// or, as often, authentication that runs inside the layer or not at all on the route.
pub(crate) fn no_actor(noticed: &Noticed) {
    if noticed.first() {
        tracing::warn!(
            "a request with an Idempotency-Key reached the idempotency layer without an actor \
             and was answered 401 unauthenticated. If the client did authenticate, the \
             authentication middleware runs inside the idempotency layer, or not on this \
             route: it must run outside it, before it. In axum, a `Router::layer` added after \
             another runs before it: add the authentication layer after the idempotency \
             layer. (Logged once per layer.)"
        );
    }
}
