//! Each upstream over HTTP, and what a SQLite upstream leaves in its file.

use http::StatusCode;
use sqlx::Connection;

use super::*;
use crate::harness::client::{Conn, Target, note_body, note_id};

/// Every kind: creates are kept and read back, the rest is 404, a bad body 400.
#[tokio::test]
async fn creates_are_kept_and_read_back_and_the_rest_is_404() {
    for kind in UpstreamKind::value_variants() {
        let name = format!("idemkey-bench-test-{}-{}", std::process::id(), kind.name());
        let upstream = Upstream::start(*kind, &name).await.unwrap();
        let target = Target::new(upstream.addr, "t").unwrap();
        let mut conn = Conn::open(&target).await.unwrap();
        let created = conn.create(None, note_body("a")).await.unwrap();
        assert_eq!(created.status, StatusCode::CREATED, "{kind:?}");
        let id = note_id(&created).unwrap();
        let read = conn.get(&format!("/v1/notes/{id}")).await.unwrap();
        assert_eq!((read.status, &read.body), (StatusCode::OK, &created.body));
        let json: serde_json::Value = serde_json::from_slice(&read.body).unwrap();
        assert_eq!(json["note"]["title"], "a");
        for path in ["/v1/notes/0", "/v1/notes/99", "/v1/notes/x", "/v1/other"] {
            let status = conn.get(path).await.unwrap().status;
            assert_eq!(status, StatusCode::NOT_FOUND, "{kind:?} {path}");
        }
        let bad = conn
            .create(None, Bytes::from_static(b"{nope"))
            .await
            .unwrap();
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        let threads = upstream.threads().unwrap();
        let dir = upstream.dir.clone();
        match kind.sqlite() {
            // The HTTP thread, the writer and the readers.
            Some(_) => assert_eq!(threads.len(), 2 + sqlite::READERS as usize),
            None => assert_eq!(threads.len(), 1),
        }
        if let Some(dir) = &dir {
            let file = dir.join("notes.db");
            let url = format!("sqlite://{}", file.display());
            let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
            let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM notes")
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert_eq!(rows, 1, "one row per create");
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert_eq!(mode, "wal");
            db.close().await.unwrap();
        }
        drop(upstream);
        assert!(dir.is_none_or(|dir| !dir.exists()), "{kind:?}");
    }
}
