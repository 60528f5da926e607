//! Hostile requests against a real `idemkey serve`, in both modes: bodies and methods built
//! to break parsing or storage get 4xx problems, never a 5xx or a crash, and never burn the
//! key for the request the client meant to send.

use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::notes::{ALICE, create_titled, problem_slug};
use idemkey_test_support::process::serve::{Serve, ServeSpec};

use crate::IDEMKEY;

struct Fixture {
    db: Db,
    server: Serve,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn start(mode: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(Backend::Sqlite, dir.path()).await;
    let spec = ServeSpec::new(IDEMKEY, db.url(), &["--mode", mode]).logged_in(dir.path());
    let server = spec.start();
    let client = reqwest::Client::new();
    Fixture {
        db,
        server,
        client,
        _dir: dir,
    }
}

impl Fixture {
    async fn raw(&self, method: &str, key: &str, body: Vec<u8>) -> reqwest::Response {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let url = format!("http://{}/v1/notes", self.server.addr);
        let request = self.client.request(method, url);
        let request = request
            .header("authorization", format!("Bearer {ALICE}"))
            .header("idempotency-key", key)
            .header("content-type", "application/json");
        request.body(body).send().await.unwrap()
    }

    /// The key still carries the request the client meant: it executes now, once.
    async fn key_is_unburnt(&self, key: &str) {
        let good = create_titled(&self.client, self.server.addr, ALICE, key, "good").send();
        let good = good.await.unwrap();
        assert_eq!(good.status(), 201, "{key}");
        assert!(good.headers().get("idempotent-replayed").is_none(), "{key}");
        let titled: Vec<_> = self
            .db
            .notes()
            .await
            .into_iter()
            .filter(|(_, t)| t == "good")
            .collect();
        assert_eq!(titled.len(), 1, "{key}");
        self.db
            .execute("DELETE FROM notes WHERE title = 'good'")
            .await;
    }
}

macro_rules! both_modes {
    ($($case:ident),* $(,)?) => {
        mod atomic { $( #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case("atomic").await } )* }
        mod lease { $( #[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() { super::$case("lease").await } )* }
    };
}

both_modes!(
    a_nul_in_the_title_is_a_400_not_a_500,
    bodies_built_to_break_the_parser_are_400s,
    another_method_is_405_and_does_not_burn_the_key,
);

/// Neither database stores a NUL in text: found by Schemathesis as a 500 from the insert.
async fn a_nul_in_the_title_is_a_400_not_a_500(mode: &str) {
    let f = start(mode).await;
    let body = br#"{"title": "\u0000\u00e8"}"#.to_vec();
    let rejected = f.raw("POST", "nul", body).await;
    assert_eq!(rejected.status(), 400, "{mode}");
    assert_eq!(problem_slug(rejected).await, "validation");
    assert_eq!(f.db.records().await, [], "{mode}: nothing stored");
    f.key_is_unburnt("nul").await;
}

/// Deep nesting, invalid UTF-8, a lone surrogate, a huge number, repeated members: each
/// is a 400 `validation`, the service stays up, and the key stays usable.
async fn bodies_built_to_break_the_parser_are_400s(mode: &str) {
    let f = start(mode).await;
    let deep = [vec![b'['; 200_000], vec![b']'; 200_000]].concat();
    let bodies: [(&str, Vec<u8>); 5] = [
        ("deep", deep),
        ("utf8", b"{\"title\": \"\xff\xfe\"}".to_vec()),
        ("surrogate", br#"{"title": "\ud800"}"#.to_vec()),
        (
            "number",
            format!("{{\"title\": 1{}}}", "0".repeat(100_000)).into_bytes(),
        ),
        ("repeated", br#"{"title": "a", "title": "b"}"#.to_vec()),
    ];
    for (key, body) in bodies {
        let rejected = f.raw("POST", key, body).await;
        assert_eq!(rejected.status(), 400, "{mode}: {key}");
        assert_eq!(problem_slug(rejected).await, "validation", "{mode}: {key}");
        f.key_is_unburnt(key).await;
    }
}

/// The route takes POST only: a PATCH with a key is the router's 405, and the key is not
/// recorded (it used to store the 405 under the create operation, so the client's POST with
/// the same key got 422 `key-reused`; found by Schemathesis).
async fn another_method_is_405_and_does_not_burn_the_key(mode: &str) {
    let f = start(mode).await;
    for method in ["PATCH", "PUT", "DELETE"] {
        let key = format!("wrong-{method}");
        let wrong = f.raw(method, &key, br#"{"title": "good"}"#.to_vec()).await;
        assert_eq!(wrong.status(), 405, "{mode}: {method}");
        let records = f.db.records().await;
        assert!(
            records.iter().all(|(k, _)| *k != key),
            "{mode}: {method} recorded nothing"
        );
        f.key_is_unburnt(&key).await;
    }
}
