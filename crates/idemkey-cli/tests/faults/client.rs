//! The client half under real faults: N logical creates from several concurrent callers, each
//! with a body of its own, through idemkey-reqwest's middleware and a lossy relay (answers lost
//! after the server acted, answers cut off, connections reset on accept, and refused for a
//! moment) in front of `idemkey serve` (atomic mode, lease mode) or `idemkey proxy`, while the
//! server is SIGKILLed and started again on the same port and database. Then the faults stop,
//! and: exactly N notes exist, no body twice, and each caller's final answer is a 201 (first or
//! replayed) carrying the id of the note with its own body.
//!
//! The relay's faults come from a fixed seed and the kills from the callers' progress; the
//! relay's counters and the callers' tallies are printed, so a failure says what happened.
//! `client_send` runs the same campaigns through `idemkey send` processes.
//!
//! The proxy's upstream is test-support's `upstream.py` with `?dedup=1`: it deduplicates on the
//! proxy's `Idempotency-Derived-Key`, as docs/proxy.md asks of an upstream behind a proxy that
//! may crash between the upstream's answer and its record, and the proxy is told so
//! (`--upstream-deduplicates`): the restarted proxy forwards the stranded claim again once its
//! lease ends. Without a key, nothing is deduplicated.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use idemkey_reqwest::reqwest_middleware::{self, ClientBuilder, ClientWithMiddleware};
use idemkey_reqwest::{Delivery, IdempotencyMiddleware, Policy};
use idemkey_test_support::db::{Backend, Db};
use idemkey_test_support::net::lossy::{Counts, Faults, LossyRelay};
use idemkey_test_support::process::Process;
use idemkey_test_support::process::notes::{ALICE, BOB, listed};
use idemkey_test_support::process::proxy::Proxy;
use idemkey_test_support::process::serve::{Serve, ServeSpec};
use serde_json::Value;

use crate::IDEMKEY;
use crate::campaign;
use idemkey_test_support::runner::rng::Rng;

/// The relay's faults for every campaign: a fixed seed, so that a failure can be replayed
/// with the same fates for the same connections.
const FAULTS: Faults = Faults {
    lose_answer: 0.15,
    cut_answer: 0.1,
    reset_on_accept: 0.1,
    seed: 31,
};

/// Lease mode's and the proxy's lease: a claim stranded by a SIGKILL expires well within the
/// callers' retry budget.
const LEASE: &str = "2s";

/// The proxy's flags: the lease, and an upstream that deduplicates on the derived key.
const PROXY_ARGS: [&str; 3] = ["--lease", LEASE, "--upstream-deduplicates"];

/// How long the relay refuses connections, once per campaign.
const REFUSAL: Duration = Duration::from_millis(300);

/// How long the clients may go without finishing a create before the campaign counts as
/// stuck: far beyond a create's retries (a minute at most) through every fault.
const STALLED: Duration = Duration::from_secs(300);

/// The Python upstream of the proxy tests, beside them.
const UPSTREAM: &str = idemkey_test_support::process::PYTHON_UPSTREAM;

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn middleware_exactly_once_through_faults_serve_atomic() {
    let plan = Plan::middleware("client serve atomic");
    run(Setup::Atomic, plan, middleware_sender).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2)]
async fn middleware_exactly_once_through_faults_serve_lease() {
    let plan = Plan::middleware("client serve lease");
    run(Setup::Lease, plan, middleware_sender).await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [python3])]
async fn middleware_exactly_once_through_faults_proxy() {
    let plan = Plan::middleware("client proxy");
    run(Setup::Proxy, plan, middleware_sender).await;
}

/// The server a campaign runs against.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Setup {
    /// `idemkey serve` on SQLite, atomic mode (the default).
    Atomic,
    /// `idemkey serve --mode lease --lease 2s` on SQLite.
    Lease,
    /// `idemkey proxy --lease 2s`, records in SQLite, before the Python upstream.
    Proxy,
}

/// A campaign's size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    /// Names the campaign in titles and the report.
    pub(crate) name: &'static str,
    /// Concurrent callers; even ones are alice, odd ones bob.
    pub(crate) callers: usize,
    /// Creates per caller, one after the other.
    pub(crate) creates: usize,
    /// SIGKILLs while the creates run.
    pub(crate) kills: usize,
}

impl Plan {
    /// 40 creates from 8 callers, the server killed 5 times.
    fn middleware(name: &'static str) -> Self {
        Self {
            name,
            callers: 8,
            creates: 5,
            kills: 5,
        }
    }

    fn total(&self) -> usize {
        self.callers * self.creates
    }
}

/// One logical create: where, as whom, and the title that is its body.
#[derive(Clone, Debug)]
pub(crate) struct Create {
    /// The URL, through the relay.
    pub(crate) url: String,
    /// The bearer token.
    pub(crate) secret: &'static str,
    /// Unique in the campaign: the note with it is the create's own.
    pub(crate) title: String,
}

impl Create {
    /// The request's body.
    pub(crate) fn body(&self) -> String {
        serde_json::json!({ "title": self.title }).to_string()
    }
}

/// What a caller got in the end for one create.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    /// The final answer's status; `None` when the caller gave up without one.
    pub(crate) status: Option<u16>,
    /// The `id` in the final answer's body.
    pub(crate) id: Option<String>,
    /// Whether the final answer was a replay, when the caller can tell.
    pub(crate) replayed: Option<bool>,
    /// Attempts made, when the caller can tell.
    pub(crate) attempts: Option<u32>,
    /// What went wrong, for the report.
    pub(crate) error: Option<String>,
    /// What the caller saw that breaks its contract (a key line missing, say): a failure.
    pub(crate) wrong: Option<String>,
}

/// How the callers send: caller number and create in, outcome out.
pub(crate) type Sender = Arc<dyn Fn(usize, Create) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// One create and its outcome.
#[derive(Clone, Debug)]
struct Receipt {
    create: Create,
    outcome: Outcome,
}

/// Runs a campaign: starts the server and the relay, runs the callers (each with the sender
/// `sender(relay address, callers)` makes) while the server is killed and the relay refuses,
/// then stops the faults and checks every note and every answer.
pub(crate) async fn run(
    setup: Setup,
    plan: Plan,
    sender: impl FnOnce(SocketAddr, usize) -> Sender,
) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(setup, dir.path()).await;
    let relay = Arc::new(LossyRelay::start(server.addr(), FAULTS).await);
    eprintln!("{}: {plan:?}, relay {:?}", plan.name, FAULTS);
    let started = Instant::now();
    let finished = Arc::new(AtomicUsize::new(0));
    let send = sender(relay.addr(), plan.callers);
    let base = format!("http://{}{}", relay.addr(), server.path());
    let callers: Vec<_> = (0..plan.callers)
        .map(|n| {
            tokio::spawn(caller(
                n,
                plan,
                base.clone(),
                send.clone(),
                finished.clone(),
            ))
        })
        .collect();
    let (server, kills) = chaos(server, &relay, plan, &finished).await;
    let mut receipts = Vec::new();
    for caller in callers {
        receipts.extend(caller.await.unwrap());
    }
    let elapsed = started.elapsed();
    relay.set_faults(Faults::none());
    relay.reopen().await;
    let report = Report {
        plan,
        relay: relay.counts(),
        kills,
        takeovers: server.takeovers(),
        tallies: tallies(&receipts),
        elapsed,
    };
    verify(&server, &receipts, &report).await;
    println!("{}: PASSED {report}", plan.name);
}

/// One caller: its creates one after the other, each with a title of its own.
async fn caller(
    n: usize,
    plan: Plan,
    url: String,
    send: Sender,
    finished: Arc<AtomicUsize>,
) -> Vec<Receipt> {
    let secret = if n.is_multiple_of(2) { ALICE } else { BOB };
    let mut receipts = Vec::new();
    for k in 0..plan.creates {
        let create = Create {
            url: url.clone(),
            secret,
            title: format!("{} caller {n} create {k}", plan.name),
        };
        let outcome = send(n, create.clone()).await;
        finished.fetch_add(1, Ordering::SeqCst);
        receipts.push(Receipt { create, outcome });
    }
    receipts
}

/// Kills and restarts the server `plan.kills` times, and has the relay refuse connections
/// once, each when the callers have finished a share of the creates (then after a short
/// seeded delay, so that requests are in flight). Returns the last server and the kills made.
async fn chaos(
    mut server: Server,
    relay: &LossyRelay,
    plan: Plan,
    finished: &AtomicUsize,
) -> (Server, usize) {
    let mut rng = Rng::new(FAULTS.seed);
    let step = (plan.total() / (plan.kills + 2)).max(1);
    let mut kills = 0;
    for i in 1..=plan.kills {
        if !progressed(finished, step * i, plan.total()).await {
            break;
        }
        tokio::time::sleep(rng.millis(0, 40)).await;
        server = tokio::task::spawn_blocking(move || server.restart())
            .await
            .unwrap();
        relay.set_upstream(server.addr());
        kills += 1;
        if i == 1 && progressed(finished, step + step / 2, plan.total()).await {
            relay.refuse_for(REFUSAL).await;
        }
    }
    (server, kills)
}

/// Waits until `threshold` creates are finished; false once all are. Panics if none finishes
/// for [`STALLED`]: the clients are stuck, and the campaign would otherwise hang.
async fn progressed(finished: &AtomicUsize, threshold: usize, total: usize) -> bool {
    let mut seen = (finished.load(Ordering::SeqCst), tokio::time::Instant::now());
    loop {
        let done = finished.load(Ordering::SeqCst);
        if done >= total {
            return false;
        }
        if done >= threshold {
            return true;
        }
        if done != seen.0 {
            seen = (done, tokio::time::Instant::now());
        }
        assert!(
            seen.1.elapsed() < STALLED,
            "no create finished for {STALLED:?}: {done} of {total}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a campaign did, for its last line and its failure message.
struct Report {
    plan: Plan,
    relay: Counts,
    kills: usize,
    takeovers: Option<usize>,
    tallies: BTreeMap<String, u64>,
    elapsed: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} creates in {:.1}s; {} kills",
            self.plan.total(),
            self.elapsed.as_secs_f64(),
            self.kills
        )?;
        if let Some(takeovers) = self.takeovers.filter(|n| *n > 0) {
            write!(f, ", {takeovers} expired leases taken over")?;
        }
        write!(f, "; relay: {}; callers: {:?}", self.relay, self.tallies)
    }
}

/// The callers' outcomes, counted: statuses, replays, attempts.
fn tallies(receipts: &[Receipt]) -> BTreeMap<String, u64> {
    let mut tallies = BTreeMap::new();
    for Receipt { outcome, .. } in receipts {
        let mut count = |what: String, n: u64| *tallies.entry(what).or_default() += n;
        match outcome.status {
            Some(status) => count(format!("final {status}"), 1),
            None => count("gave up".to_owned(), 1),
        }
        if outcome.replayed == Some(true) {
            count("replayed".to_owned(), 1);
        }
        if let Some(attempts) = outcome.attempts {
            count("attempts".to_owned(), u64::from(attempts));
        }
    }
    tallies
}

/// Exactly one note per create, listed through the service and stored once, and each
/// caller's answer is a 201 with its own note's id; and the campaign met faults.
async fn verify(server: &Server, receipts: &[Receipt], report: &Report) {
    let listed = server.listed().await;
    let stored = server.stored().await;
    let total = report.plan.total();
    let mut problems = Vec::new();
    if receipts.len() != total || listed.len() != total || stored != total {
        problems.push(format!(
            "{total} creates: {} outcomes, {} notes listed, {stored} stored",
            receipts.len(),
            listed.len()
        ));
    }
    problems.extend(answers(receipts, &listed));
    problems.extend(server.keyed(total).await);
    let name = report.plan.name;
    let mut message = String::new();
    for problem in &problems {
        let _ = writeln!(message, "  {problem}");
    }
    assert!(
        problems.is_empty(),
        "{name}: {} problems:\n{message}{report}\n{}",
        problems.len(),
        server.log_tail()
    );
    let met = report.relay.answers_lost + report.relay.answers_cut;
    assert!(
        report.kills > 0 && met > 0,
        "{name}: no kill or no lost answer, so nothing was shown: {report}"
    );
}

/// What is wrong with the answers: a create whose answer is not a 201 carrying the id of
/// the one note with its title, and notes no create made.
fn answers(receipts: &[Receipt], listed: &[(String, String)]) -> Vec<String> {
    let mut by_title: HashMap<&str, Vec<&str>> = HashMap::new();
    for (title, id) in listed {
        by_title.entry(title).or_default().push(id);
    }
    let mut problems = Vec::new();
    for Receipt { create, outcome } in receipts {
        let ids = by_title.remove(create.title.as_str()).unwrap_or_default();
        let own = outcome.wrong.is_none()
            && outcome.status == Some(201)
            && ids.len() == 1
            && outcome.id.as_deref() == ids.first().copied();
        if !own {
            let error = outcome.wrong.as_ref().or(outcome.error.as_ref());
            problems.push(format!(
                "{:?}: status {:?}, id {:?}, after {:?} attempts, {error:?}; its notes: {ids:?}",
                create.title, outcome.status, outcome.id, outcome.attempts
            ));
        }
    }
    for (title, ids) in by_title {
        problems.push(format!("notes nobody created: {title:?} {ids:?}"));
    }
    problems
}

/// The server under test, killed with SIGKILL and started again on its port and database.
enum Server {
    /// `idemkey serve` on a SQLite file.
    Serve {
        spec: ServeSpec,
        serve: Serve,
        db: Db,
    },
    /// `idemkey proxy` before the Python upstream, its records in a SQLite file.
    Proxy {
        upstream: Upstream,
        records: String,
        proxy: Proxy,
    },
}

impl Server {
    async fn start(setup: Setup, dir: &Path) -> Self {
        let lease = ["--mode", "lease", "--lease", LEASE];
        let args: &[&str] = match setup {
            Setup::Atomic => &[],
            Setup::Lease => &lease,
            Setup::Proxy => return Self::proxy(dir).await,
        };
        let db = Db::create(Backend::Sqlite, dir).await;
        let spec = ServeSpec::new(IDEMKEY, db.url(), args).logged_in(dir);
        let serve = campaign::start(spec.clone(), None).await;
        Self::Serve { spec, serve, db }
    }

    async fn proxy(dir: &Path) -> Self {
        let records = format!("sqlite://{}", dir.join("proxy.db").display());
        let records_ = records.clone();
        let records_dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let upstream = Upstream::start(&records_dir);
            let proxy = Proxy::start(IDEMKEY, &upstream.url(), &records_, &PROXY_ARGS);
            Self::Proxy {
                upstream,
                records,
                proxy,
            }
        })
        .await
        .unwrap()
    }

    /// Where the server listens.
    fn addr(&self) -> SocketAddr {
        match self {
            Self::Serve { serve, .. } => serve.addr,
            Self::Proxy { proxy, .. } => proxy.addr,
        }
    }

    /// The creates' path (and query).
    fn path(&self) -> &'static str {
        match self {
            Self::Serve { .. } => "/v1/notes",
            Self::Proxy { .. } => "/items?dedup=1",
        }
    }

    /// SIGKILL, then a new process on the same database (and port, if it is free again).
    fn restart(self) -> Self {
        match self {
            Self::Serve { spec, serve, db } => {
                let addr = serve.addr;
                serve.kill9();
                let serve = spec.start_again_on(addr);
                let serve = serve.unwrap_or_else(|| panic!("no restart: {}", spec.log_tail()));
                Self::Serve { spec, serve, db }
            }
            Self::Proxy {
                upstream,
                records,
                mut proxy,
            } => {
                proxy.process.kill();
                let addr = proxy.addr.to_string();
                let proxy = Proxy::start_at(IDEMKEY, &addr, &upstream.url(), &records, &PROXY_ARGS);
                Self::Proxy {
                    upstream,
                    records,
                    proxy,
                }
            }
        }
    }

    /// Every note of alice and bob, (title, id), listed through the service.
    async fn listed(&self) -> Vec<(String, String)> {
        let (path, field) = match self {
            Self::Serve { .. } => ("/v1/notes", "notes"),
            Self::Proxy { .. } => ("/items", "items"),
        };
        let (client, url) = (
            reqwest::Client::new(),
            format!("http://{}{path}", self.addr()),
        );
        let mut notes = listed(&client, &url, field, ALICE).await;
        notes.extend(listed(&client, &url, field, BOB).await);
        notes
    }

    /// How many notes were stored: rows of the SQLite file, or the upstream's own count.
    async fn stored(&self) -> usize {
        match self {
            Self::Serve { db, .. } => db.notes().await.len(),
            Self::Proxy { upstream, .. } => upstream.created().await,
        }
    }

    /// What is wrong with the server's record of keys: one record per create, each
    /// completed; or, behind the proxy, one derived key per create on every forward.
    async fn keyed(&self, total: usize) -> Vec<String> {
        let keys = match self {
            Self::Serve { db, .. } => {
                let records = db.records().await;
                let open = records.iter().filter(|(_, state)| *state != 2).count();
                if records.len() == total && open == 0 {
                    return Vec::new();
                }
                format!("{} records, {open} not completed", records.len())
            }
            Self::Proxy { upstream, .. } => {
                let forwards = upstream.derived_keys().await;
                let keys: HashSet<_> = forwards.iter().flatten().collect();
                let keyless = forwards.iter().filter(|key| key.is_none()).count();
                if keys.len() == total && keyless == 0 {
                    return Vec::new();
                }
                format!(
                    "{} forwards under {} derived keys, {keyless} without",
                    forwards.len(),
                    keys.len()
                )
            }
        };
        vec![format!("{total} creates: {keys}")]
    }

    /// How many expired leases the servers took over (claims a SIGKILL stranded), from
    /// their log; `None` for the proxy, which logs to the test's stderr.
    fn takeovers(&self) -> Option<usize> {
        let Self::Serve { spec, .. } = self else {
            return None;
        };
        Some(spec.log().matches("took over an expired lease").count())
    }

    fn log_tail(&self) -> String {
        match self {
            Self::Serve { spec, .. } => spec.log_tail(),
            Self::Proxy { .. } => "the proxy logs to the test's stderr".to_owned(),
        }
    }
}

/// test-support's `upstream.py` as a real process, killed when dropped.
struct Upstream {
    _process: Process,
    addr: SocketAddr,
}

impl Upstream {
    /// Starts the upstream, its stderr (a traceback for each answer the proxy's death
    /// cut short) in `upstream.log` in `dir`.
    fn start(dir: &Path) -> Self {
        let log = File::create(dir.join("upstream.log")).unwrap();
        let mut command = Command::new("python3");
        command.args([UPSTREAM, "0"]).stderr(log);
        let process = Process::spawn(&mut command);
        let port = process.first_line.rsplit(' ').next().unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port.parse().unwrap()));
        Self {
            _process: process,
            addr,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Items the upstream created, deduplicated ones not counted.
    async fn created(&self) -> usize {
        self.stats().await["created"].as_u64().unwrap() as usize
    }

    /// The derived key of every create the upstream was sent, `None` for one without.
    async fn derived_keys(&self) -> Vec<Option<String>> {
        let stats = self.stats().await;
        let keys = stats["derived_keys"].as_array().unwrap();
        keys.iter()
            .map(|key| key.as_str().map(str::to_owned))
            .collect()
    }

    async fn stats(&self) -> Value {
        let stats = reqwest::get(format!("{}/stats", self.url())).await;
        stats.unwrap().json().await.unwrap()
    }
}

/// Callers through the middleware, each with a client of its own, limited to the relay.
fn middleware_sender(relay: SocketAddr, callers: usize) -> Sender {
    let base = format!("http://{relay}/").parse().unwrap();
    // Backoff shorter than the default (0.5 s doubling to 5 s) keeps the campaign short;
    // 40 retries within 60 s outlast a restart and a stranded claim's 2 s lease.
    let policy = Policy::for_base(base)
        .max_retries(40)
        .max_elapsed(Duration::from_secs(60))
        .initial_backoff(Duration::from_millis(100))
        .max_backoff(Duration::from_secs(1));
    let clients: Vec<ClientWithMiddleware> = (0..callers)
        .map(|_| {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            ClientBuilder::new(http)
                .with(IdempotencyMiddleware::new(policy.clone()))
                .build()
        })
        .collect();
    Arc::new(move |n, create| {
        let client = clients[n].clone();
        Box::pin(async move { through_middleware(&client, create).await })
    })
}

/// One create through the middleware: its final answer, or why there was none.
async fn through_middleware(client: &ClientWithMiddleware, create: Create) -> Outcome {
    let sent = client
        .post(&create.url)
        .header("authorization", format!("Bearer {}", create.secret))
        .header("content-type", "application/json")
        .body(create.body())
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return gave_up(&error),
    };
    let delivery = response.extensions().get::<Delivery>().cloned();
    let status = response.status().as_u16();
    let text = response.text().await;
    let body: Option<Value> = text
        .as_deref()
        .ok()
        .and_then(|t| serde_json::from_str(t).ok());
    Outcome {
        status: Some(status),
        id: body
            .as_ref()
            .and_then(|b| b["id"].as_str())
            .map(str::to_owned),
        replayed: delivery.as_ref().map(|d| d.replayed),
        attempts: delivery.as_ref().map(|d| d.attempts),
        error: match text {
            Ok(text) if status != 201 => Some(text),
            Ok(_) => None,
            Err(error) => Some(format!("body: {error}")),
        },
        wrong: None,
    }
}

/// The outcome of a create the middleware gave up on.
fn gave_up(error: &reqwest_middleware::Error) -> Outcome {
    let attempts = match error {
        reqwest_middleware::Error::Middleware(inner) => {
            match inner.downcast_ref::<idemkey_reqwest::Error>() {
                Some(idemkey_reqwest::Error::GaveUp { attempts, .. }) => Some(*attempts),
                _ => None,
            }
        }
        _ => None,
    };
    Outcome {
        attempts,
        error: Some(format!("{error:#}")),
        ..Outcome::default()
    }
}
