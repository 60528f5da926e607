//! The lease-mode layer over a real `RedisStore`: an axum server on 127.0.0.1:0 with a handler
//! the tests gate, a reqwest client, and a Redis `MONITOR` that reports what the store sends
//! for one record, so a test can wait until a request has reached Redis without hooking the
//! store.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{CONTENT_TYPE, LOCATION};
use http::{HeaderMap, StatusCode};
use idemkey_core::{Key, Operation, Record, Scope, Store as _};
use idemkey_redis::{RedisOptions, RedisStore};
use idemkey_tower::{Actor, Config, IdempotencyLayer, Keys};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

use crate::common::{Store, unique_prefix};

/// How long any wait of the tests lasts before it fails the test instead of hanging.
const PATIENCE: Duration = Duration::from_secs(20);

/// What the handlers share with the test (one per test, shared by every instance).
#[derive(Default)]
pub struct Ctx {
    /// How many times the handler ran.
    runs: AtomicUsize,
    /// A permit per handler run that started.
    pub entered: Signal,
    /// Permits the test hands out to let gated handlers finish.
    pub release: Signal,
    /// Thaws for handlers of a frozen instance (see [`App::frozen_sibling`]).
    pub frozen: Freeze,
    /// A permit per request future dropped before it finished (client gone).
    pub dropped: Signal,
    /// The derived key `charge` seen by each run, in order.
    pub derived: Mutex<Vec<String>>,
}

impl Ctx {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// A counted event: raised by one side, taken once per raise by the other.
pub struct Signal(Semaphore);

impl Default for Signal {
    fn default() -> Self {
        Self(Semaphore::new(0))
    }
}

impl Signal {
    pub fn raise(&self, times: usize) {
        self.0.add_permits(times);
    }

    async fn take(&self) {
        self.0.acquire().await.expect("never closed").forget();
    }
}

/// Takes one raise of `signal`; fails the test instead of hanging if it never comes.
pub async fn wait_for(what: &str, signal: &Signal) {
    tokio::time::timeout(PATIENCE, signal.take())
        .await
        .unwrap_or_else(|_| panic!("gave up waiting for {what}"));
}

/// A gate that blocks the handler's *thread*, not just its task: on a current-thread runtime
/// nothing else of that instance runs meanwhile, its lease heartbeat included.
#[derive(Default)]
pub struct Freeze {
    thawed: Mutex<usize>,
    changed: Condvar,
}

impl Freeze {
    pub fn thaw(&self) {
        *self.thawed.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    fn hold(&self) {
        let thawed = self.thawed.lock().unwrap();
        let (mut thawed, waited) = self
            .changed
            .wait_timeout_while(thawed, PATIENCE * 3, |n| *n == 0)
            .unwrap();
        assert!(!waited.timed_out(), "the frozen handler was never thawed");
        *thawed -= 1;
    }
}

#[derive(Clone)]
struct Handler {
    ctx: Arc<Ctx>,
    freeze: bool,
}

/// `POST /gated`: counts the run, records its derived key, raises `entered`, then waits for
/// the test (on `release`, or frozen on `frozen`) and answers 201 `{"n":<run>,"len":<body>}`.
async fn gated(State(handler): State<Handler>, request: Request) -> Response {
    let ctx = &handler.ctx;
    if let Some(keys) = Keys::from_extensions(request.extensions()) {
        let keys = keys.get().await.unwrap();
        ctx.derived.lock().unwrap().push(keys.key("charge"));
    }
    let n = ctx.runs.fetch_add(1, Ordering::SeqCst) + 1;
    ctx.entered.raise(1);
    if handler.freeze {
        ctx.frozen.hold();
    } else {
        ctx.release.take().await;
    }
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .expect("a readable body");
    let headers = [
        (LOCATION, format!("/gated/{n}")),
        (CONTENT_TYPE, "application/json".to_owned()),
    ];
    let body = format!(r#"{{"n":{n},"len":{}}}"#, body.len());
    (StatusCode::CREATED, headers, body).into_response()
}

/// Authentication stand-in: the actor is the `x-actor` header.
async fn authenticate(mut request: Request) -> Request {
    let actor = request.headers().get("x-actor");
    if let Some(actor) = actor.and_then(|v| v.to_str().ok()).map(Actor::new) {
        request.extensions_mut().insert(actor);
    }
    request
}

/// Counts request futures dropped before they finished.
async fn probe(State(handler): State<Handler>, request: Request, next: Next) -> Response {
    struct Armed(Arc<Ctx>, bool);
    impl Drop for Armed {
        fn drop(&mut self) {
            if self.1 {
                self.0.dropped.raise(1);
            }
        }
    }
    let mut armed = Armed(handler.ctx, true);
    let response = next.run(request).await;
    armed.1 = false;
    response
}

fn router(handler: Handler, store: Store, config: Config) -> Router {
    Router::new()
        .route("/gated", post(gated))
        .layer(IdempotencyLayer::with_config(store, config))
        .layer(middleware::from_fn_with_state(handler.clone(), probe))
        .layer(middleware::map_request(authenticate))
        .with_state(handler)
}

async fn connect(url: &str, prefix: &str) -> Store {
    let options = RedisOptions::new().prefix(prefix);
    RedisStore::connect_with(url, &options).await.unwrap()
}

async fn listen() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    (listener, base)
}

/// One instance of the application, and a client for it.
pub struct App {
    base: String,
    url: String,
    prefix: String,
    client: reqwest::Client,
    pub ctx: Arc<Ctx>,
    /// The test's own handle on the instance's records (same server, same prefix).
    pub store: Store,
    /// Stops a frozen sibling's runtime thread when dropped.
    _stop: Option<oneshot::Sender<()>>,
}

impl App {
    /// An instance on the Redis at `url`, under a fresh key prefix, serving from this runtime.
    pub async fn start(url: &str, config: Config) -> Self {
        Self::start_on(url, unique_prefix(), Arc::new(Ctx::default()), config).await
    }

    /// A second instance on the same records and `Ctx`, in this runtime: another process of
    /// the service, whose layer knows nothing of what this one is executing, so its
    /// duplicates of this one's requests go to Redis.
    pub async fn sibling(&self, config: Config) -> Self {
        Self::start_on(&self.url, self.prefix.clone(), self.ctx.clone(), config).await
    }

    async fn start_on(url: &str, prefix: String, ctx: Arc<Ctx>, config: Config) -> Self {
        let store = connect(url, &prefix).await;
        let handler = Handler {
            ctx: ctx.clone(),
            freeze: false,
        };
        let (listener, base) = listen().await;
        let app = router(handler, store.clone(), config);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            base,
            url: url.to_owned(),
            prefix,
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(PATIENCE * 3)
                .build()
                .unwrap(),
            ctx,
            store,
            _stop: None,
        }
    }

    /// A second instance on the same records and `Ctx`, as another process would be: its own
    /// current-thread runtime on a thread of its own, its own Redis connection. Its handler
    /// blocks that thread until [`Freeze::thaw`], so while it runs, the instance is stalled
    /// whole (its heartbeat cannot renew the lease), like a process paused by the OS.
    pub async fn frozen_sibling(&self, config: Config) -> Self {
        let (ready, base) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        let handler = Handler {
            ctx: self.ctx.clone(),
            freeze: true,
        };
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let store = connect(&url, &prefix).await;
                let (listener, base) = listen().await;
                ready.send(base).unwrap();
                let app = router(handler, store, config);
                tokio::select! {
                    _ = axum::serve(listener, app) => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            base: base.await.unwrap(),
            url: self.url.clone(),
            prefix: self.prefix.clone(),
            client: self.client.clone(),
            ctx: self.ctx.clone(),
            store: self.store.clone(),
            _stop: Some(stop),
        }
    }

    /// `POST /gated` from actor `a` with key `key` and an empty body.
    pub fn post(&self, key: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/gated", self.base))
            .header("x-actor", "a")
            .header("idempotency-key", key)
    }

    /// `POST /gated` from actor `a` with key `key` and a JSON body.
    pub fn json(&self, key: &str, body: &str) -> reqwest::RequestBuilder {
        self.post(key)
            .header("content-type", "application/json")
            .body(body.to_owned())
    }

    /// The scope the layer gives `POST /gated` from actor `a` with key `key`.
    pub fn scope(key: &str) -> Scope {
        let operation = Operation::new("POST /gated", "v1");
        Scope::new("a", &operation, Key::parse(key.as_bytes()).unwrap())
    }

    /// The live record of key `key`, read from Redis.
    pub async fn record(&self, key: &str) -> Option<Record> {
        self.store.lookup(&Self::scope(key)).await.unwrap()
    }

    /// Reads the record of `key` until `ready` holds for it, and returns it. A wait on the
    /// store's state, not a fixed sleep; fails the test if the state never comes.
    pub async fn record_when(
        &self,
        key: &str,
        what: &str,
        ready: impl Fn(&Record) -> bool,
    ) -> Record {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(record) = self.record(key).await.filter(&ready) {
                return record;
            }
            assert!(Instant::now() < deadline, "gave up waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts watching what clients send Redis for key `key`'s record.
    pub async fn monitor(&self, key: &str) -> Monitor {
        Monitor::start(&self.url, self.store.record_key(&Self::scope(key))).await
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// Asserts an idemkey problem response with this status and slug.
    pub fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "body: {:?}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.header("cache-control"), Some("no-store"));
        let body = self.json();
        let type_uri = body["type"].as_str().expect("a type");
        assert!(type_uri.ends_with(&format!("#{slug}")), "{type_uri}");
        assert_eq!(body["status"], status);
    }
}

pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("a whole body");
    Reply {
        status,
        headers,
        body,
    }
}

/// A Redis `MONITOR` connection, filtered to the scripts clients run on one record key.
///
/// The store runs one script per operation, `EVALSHA sha 1 <key> actor operation key ...`;
/// the argument count tells them apart: a lookup has those 3, a claim 10 (the 4th being the
/// new record id, drawn per `try_claim`, which tells a claim from its resend on `NOSCRIPT`).
/// Commands run inside scripts (`[0 lua]`) are ignored. Monitoring is on once `start`
/// returns: the server has answered `MONITOR` by then.
pub struct Monitor {
    seen: Arc<Seen>,
    task: JoinHandle<()>,
}

#[derive(Default)]
pub struct Seen {
    /// A permit per claim script run on the key.
    pub claims: Signal,
    /// A permit per lookup script run on the key.
    pub lookups: Signal,
}

impl Monitor {
    async fn start(url: &str, record_key: String) -> Self {
        let client = redis::Client::open(url).unwrap();
        let monitor = client.get_async_monitor().await.unwrap();
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        let task = tokio::spawn(async move {
            let mut claims = HashSet::new();
            let mut lines = monitor.into_on_message::<String>();
            while let Some(line) = lines.next().await {
                let Some(args) = script_args(&line) else {
                    continue;
                };
                if args.get(3) != Some(&record_key.as_str()) {
                    continue;
                }
                // The command, its script, one key, the key's name, then the lookup's 3
                // arguments or the claim's 12.
                match args.len() {
                    7 => counts.lookups.raise(1),
                    16 if claims.insert(args[7].to_owned()) => counts.claims.raise(1),
                    _ => {}
                }
            }
        });
        Self { seen, task }
    }
}

impl std::ops::Deref for Monitor {
    type Target = Seen;

    fn deref(&self) -> &Seen {
        &self.seen
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The arguments, still escaped, of a client's `EVAL`/`EVALSHA` in a `MONITOR` line
/// (`1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "…" "1" "key" …`); `None` for anything else.
fn script_args(line: &str) -> Option<Vec<&str>> {
    let (source, rest) = line.split_once('[')?.1.split_once("] ")?;
    if source.ends_with(" lua") {
        return None;
    }
    let mut args = Vec::new();
    let mut chars = rest.char_indices();
    while let Some((start, c)) = chars.next() {
        if c != '"' {
            continue;
        }
        // sdscatrepr: a backslash escapes the next character; `\xHH` continues with hex digits.
        loop {
            match chars.next()? {
                (_, '\\') => {
                    chars.next()?;
                }
                (end, '"') => {
                    args.push(&rest[start + 1..end]);
                    break;
                }
                _ => {}
            }
        }
    }
    let command = args.first()?.to_ascii_lowercase();
    (command == "evalsha" || command == "eval").then_some(args)
}

#[idemkey_test_support::test]
fn monitor_lines_split_into_their_arguments() {
    let line = r#"1796070773.747861 [0 127.0.0.1:40964] "evalsha" "ab" "1" "p:{x}" "a" "POST /x" "\x01\"]""#;
    let args = script_args(line).unwrap();
    assert_eq!(
        args,
        ["evalsha", "ab", "1", "p:{x}", "a", "POST /x", r#"\x01\"]"#]
    );
    assert!(script_args(r#"1.0 [0 lua] "EVALSHA" "x""#).is_none());
    assert!(script_args(r#"1.0 [0 127.0.0.1:1] "HGETALL" "p:{x}""#).is_none());
}
