//! The service's routes without idempotency: what the layer is measured against.

use axum::Router;
use axum::routing::post;
use idemkey_sqlx::SqlxStore;

use crate::{NotesConfig, NotesDb, build, create};

/// The service's routes with no idempotency layer on `POST /v1/notes`, on a migrated store:
/// every create writes as lease mode writes a request without a key (one statement on the
/// store's writer), and an `Idempotency-Key` is ignored. Not a service to run, since a retry
/// creates a second note: the same routes as [`crate::router`]'s minus the layer, so that
/// the two measured side by side show what the layer costs (`idemkey-bench layer`).
pub fn router_without_idempotency<DB: NotesDb>(
    store: SqlxStore<DB>,
    config: NotesConfig,
) -> Router {
    build(store, (post(create::create_lease::<DB>), false), config)
}
