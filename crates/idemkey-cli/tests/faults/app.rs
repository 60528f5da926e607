//! The notes service in-process, on a store whose failpoints the test controls, behind a
//! real socket: faults at each store step, seen through HTTP.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkey_notes::{Mode, NotesConfig, NotesDb, router};
use idemkey_sqlx::failpoints::{Hook, Point, injected};
use idemkey_sqlx::{MySqlStore, PgStore, SqliteStore, SqlxStore};
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::process::notes::{ALICE, create_titled};
use tokio::sync::Semaphore;

/// What an armed failpoint does on its next hits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Action {
    /// Fails this many hits with an injected store error.
    Fail(usize),
    /// Pauses the next hit until [`Faults::go`], then lets it continue.
    Pause,
}

/// The failpoints of one app: armed per point, disarmed once used up.
pub(crate) struct Faults {
    armed: Mutex<Vec<(Point, Action)>>,
    reached: Semaphore,
    go: Semaphore,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            armed: Mutex::default(),
            reached: Semaphore::new(0),
            go: Semaphore::new(0),
        }
    }
}

impl Faults {
    pub(crate) fn arm(&self, point: Point, action: Action) {
        self.armed.lock().unwrap().push((point, action));
    }

    pub(crate) fn disarm(&self) {
        self.armed.lock().unwrap().clear();
    }

    /// Waits until a request is paused at an armed [`Action::Pause`] point.
    pub(crate) async fn reached(&self) {
        let wait = self.reached.acquire();
        let permit = tokio::time::timeout(Duration::from_secs(60), wait).await;
        permit
            .expect("no request reached the paused point")
            .unwrap()
            .forget();
    }

    /// Lets the paused request go on.
    pub(crate) fn go(&self) {
        self.go.add_permits(1);
    }

    fn take(&self, point: Point) -> Option<Action> {
        let mut armed = self.armed.lock().unwrap();
        let at = armed.iter().position(|(p, _)| *p == point)?;
        let action = armed[at].1;
        match action {
            Action::Fail(n) if n > 1 => armed[at].1 = Action::Fail(n - 1),
            _ => {
                armed.remove(at);
            }
        }
        Some(action)
    }

    pub(crate) fn hook(self: &Arc<Self>) -> Hook {
        let faults = self.clone();
        Arc::new(move |point| {
            let faults = faults.clone();
            Box::pin(async move {
                match faults.take(point) {
                    Some(Action::Fail(_)) => Err(injected(point)),
                    Some(Action::Pause) => {
                        faults.reached.add_permits(1);
                        faults.go.acquire().await.unwrap().forget();
                        Ok(())
                    }
                    None => Ok(()),
                }
            })
        })
    }
}

/// A running in-process notes service.
pub(crate) struct App {
    pub(crate) addr: SocketAddr,
    pub(crate) db: Db,
    pub(crate) faults: Arc<Faults>,
    pub(crate) client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl App {
    /// Starts the service for `backend` in `mode` with a `lease`, as `idemkey serve` runs it
    /// (lease mode completes in the note's transaction).
    pub(crate) async fn start(backend: Backend, mode: Mode, lease: Duration) -> Self {
        Self::start_with(backend, mode, lease, false).await
    }

    /// The same, lease mode storing the response in the store's own transaction after the
    /// note's (`--separate-completion`): the path of behaviour §10's completion retries.
    pub(crate) async fn start_separate(backend: Backend, mode: Mode, lease: Duration) -> Self {
        Self::start_with(backend, mode, lease, true).await
    }

    async fn start_with(
        backend: Backend,
        mode: Mode,
        lease: Duration,
        separate_completion: bool,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::create(backend, dir.path()).await;
        let faults = Arc::new(Faults::default());
        let config = NotesConfig {
            tokens: vec![("alice".into(), ALICE.into())],
            mode,
            lease,
            separate_completion,
            ..NotesConfig::default()
        };
        let addr = match &db {
            Db::Sqlite(_) => {
                let store = SqliteStore::connect(&db.url()).await.unwrap();
                serve(store.with_failpoints(faults.hook()), config).await
            }
            Db::Postgres { .. } => {
                let store = PgStore::connect(&db.url()).await.unwrap();
                serve(store.with_failpoints(faults.hook()), config).await
            }
            Db::Mysql(_) => {
                let store = MySqlStore::connect(&db.url()).await.unwrap();
                serve(store.with_failpoints(faults.hook()), config).await
            }
        };
        let client = reqwest::Client::new();
        Self {
            addr,
            db,
            faults,
            client,
            _dir: dir,
        }
    }

    /// POSTs a note titled `title` under `key`.
    pub(crate) async fn post(&self, key: &str, title: &str) -> reqwest::Response {
        let request = create_titled(&self.client, self.addr, ALICE, key, title);
        request.send().await.unwrap()
    }

    /// The same POST (title `key`) as a future that owns what it needs, for `tokio::spawn`.
    pub(crate) fn post_owned(&self, key: &str) -> impl Future<Output = reqwest::Response> + use<> {
        let request = create_titled(&self.client, self.addr, ALICE, key, key);
        async move { request.send().await.unwrap() }
    }

    /// The ids of the notes titled `title`.
    pub(crate) async fn notes(&self, title: &str) -> Vec<String> {
        let notes = self.db.notes().await;
        notes
            .into_iter()
            .filter(|(_, t)| t == title)
            .map(|(id, _)| id)
            .collect()
    }

    /// The state of `key`'s record, if there is one.
    pub(crate) async fn record(&self, key: &str) -> Option<i64> {
        let records = self.db.records().await;
        records
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, state)| state)
    }
}

async fn serve<DB: NotesDb>(store: SqlxStore<DB>, config: NotesConfig) -> SocketAddr {
    DB::migrate_notes(store.pool()).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router(store, config)).await });
    addr
}

/// The id in a 201's body.
pub(crate) async fn created_id(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 201);
    let body: serde_json::Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}
