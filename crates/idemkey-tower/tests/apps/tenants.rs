//! A multi-tenant API: routers nested under `/orgs/{org}`, `Json<T>` with serde validation,
//! query parameters, `State`, and authentication by `from_fn` outside the layer.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router, middleware};
use http::StatusCode;
use idemkey_tower::Actor;
use idemkey_tower::Config;
use idemkey_tower::atomic::{DbError, Tx};
use serde::Deserialize;
use sqlx::{Sqlite, SqliteConnection};

use crate::bed::{Client, Db, Mode, auth, send, serve};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewNote {
    title: String,
}

#[derive(Deserialize)]
struct Flags {
    #[serde(default)]
    draft: bool,
}

async fn insert(
    conn: &mut SqliteConnection,
    (org, actor): (&str, &Actor),
    note: &NewNote,
    flags: &Flags,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO notes (org, actor, title, draft) VALUES (?1, ?2, ?3, ?4) RETURNING id",
    )
    .bind(org)
    .bind(actor.as_str())
    .bind(&note.title)
    .bind(flags.draft)
    .fetch_one(conn)
    .await
}

fn created(id: i64, org: &str, note: &NewNote) -> Response {
    let body = serde_json::json!({"id": id, "org": org, "title": note.title});
    (StatusCode::CREATED, Json(body)).into_response()
}

/// Lease mode: the note is written on a connection of its own.
async fn create_lease(
    State(db): State<Db>,
    Path(org): Path<String>,
    Query(flags): Query<Flags>,
    Extension(actor): Extension<Actor>,
    Json(note): Json<NewNote>,
) -> Result<Response, DbError> {
    let mut conn = db.store.write_conn().await.unwrap();
    let id = insert(&mut conn, (&org, &actor), &note, &flags).await?;
    Ok(created(id, &org, &note))
}

/// Atomic mode: the note is written on the claim's transaction.
async fn create_atomic(
    Path(org): Path<String>,
    Query(flags): Query<Flags>,
    Extension(actor): Extension<Actor>,
    mut tx: Tx<Sqlite>,
    Json(note): Json<NewNote>,
) -> Result<Response, DbError> {
    let id = insert(&mut tx, (&org, &actor), &note, &flags).await?;
    Ok(created(id, &org, &note))
}

async fn app(db: &Db, mode: Mode) -> Client {
    let org = match mode {
        Mode::Lease => Router::new().route("/notes", post(create_lease)),
        Mode::Atomic => Router::new().route("/notes", post(create_atomic)),
    };
    let org = db.protect(mode, Config::default(), org);
    let app = Router::new()
        .nest("/orgs/{org}", org)
        .layer(middleware::from_fn(auth))
        .with_state(db.clone());
    Client::new(serve(app).await)
}

const NOTE: &str = r#"{"title": "quarterly plan"}"#;

/// Contract §4: the same key and body sent to two tenants are two different requests. The
/// nested router sees `/notes` for both; the fingerprint must cover the path the client sent.
#[idemkey_test_support::test]
async fn nested_tenants_never_share_a_response() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let client = app(&db, mode).await;
        let a = send(client.post("/orgs/a/notes", "k", NOTE)).await;
        assert_eq!(a.status, 201, "{mode:?}");
        let b = send(client.post("/orgs/b/notes", "k", NOTE)).await;
        assert!(!b.replayed(), "{mode:?}: org b got org a's response");
        assert_eq!((b.status, b.slug()), (422, "key-reused".into()), "{mode:?}");
        let fresh = send(client.post("/orgs/b/notes", "k2", NOTE)).await;
        assert_eq!(fresh.status, 201, "{mode:?}");
        assert_eq!(fresh.json()["org"], "b");
        let per_org = db.count("SELECT count(*) FROM notes WHERE org = 'b'").await;
        assert_eq!((db.notes().await, per_org), (2, 1), "{mode:?}");
    }
}

/// Query parameters are part of the request; their order is not.
#[idemkey_test_support::test]
async fn query_parameters_are_part_of_the_request() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let client = app(&db, mode).await;
        let first = send(client.post("/orgs/a/notes?draft=true&x=1", "q", NOTE)).await;
        assert_eq!(first.status, 201, "{mode:?}");
        let reordered = send(client.post("/orgs/a/notes?x=1&draft=true", "q", NOTE)).await;
        assert!(reordered.replayed(), "{mode:?}");
        let other = send(client.post("/orgs/a/notes?draft=false&x=1", "q", NOTE)).await;
        assert_eq!((other.status, other.slug()), (422, "key-reused".into()));
        assert_eq!(db.notes().await, 1, "{mode:?}");
    }
}

/// Contract §4 and §6: axum's `Json` rejections (415, 400, 422) reject the request's shape.
/// They are not stored, and the client that corrects its body reuses its key.
#[idemkey_test_support::test]
async fn rejected_extractions_leave_the_key_usable() {
    for mode in Mode::ALL {
        let db = Db::new().await;
        let client = app(&db, mode).await;
        let wrong_type = client
            .request(http::Method::POST, "/orgs/a/notes")
            .header("idempotency-key", "fix-me")
            .body(NOTE);
        let bad = [
            (wrong_type, 415),
            (client.post("/orgs/a/notes", "fix-me", "{\"title\":"), 400),
            (
                client.post("/orgs/a/notes", "fix-me", r#"{"title": 7}"#),
                422,
            ),
            (
                client.post("/orgs/a/notes", "fix-me", r#"{"title": "x", "y": 1}"#),
                422,
            ),
        ];
        for (request, status) in bad {
            let rejected = send(request).await;
            assert_eq!(rejected.status, status, "{mode:?}");
            assert!(!rejected.replayed(), "{mode:?}");
        }
        assert_eq!(
            db.records().await,
            0,
            "{mode:?}: nothing kept of the rejections"
        );
        let corrected = send(client.post("/orgs/a/notes", "fix-me", NOTE)).await;
        assert_eq!(corrected.status, 201, "{mode:?}");
        assert!(!corrected.replayed(), "{mode:?}");
        let retry = send(client.post("/orgs/a/notes", "fix-me", NOTE)).await;
        assert!(retry.replayed(), "{mode:?}");
        assert_eq!((db.notes().await, db.records().await), (1, 1), "{mode:?}");
    }
}

/// Authentication runs outside the layer: without credentials nothing is claimed.
#[idemkey_test_support::test]
async fn unauthenticated_requests_never_reach_the_layer() {
    let db = Db::new().await;
    let client = app(&db, Mode::Atomic).await;
    let anonymous = reqwest::Client::new()
        .post(format!("{}/orgs/a/notes", client.base))
        .header("idempotency-key", "k")
        .header("content-type", "application/json")
        .body(NOTE);
    assert_eq!(send(anonymous).await.status, 401);
    assert_eq!(db.claims(), 0);
}
