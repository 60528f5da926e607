//! The crash campaign's moving parts: retrying clients, and a killer that SIGKILLs the server
//! at random moments and restarts it on the same database (and the same port if it can),
//! cutting the power of the filesystem under the database in between when there is one (the
//! power-loss campaigns: [`Power`]); then the verification, which returns what it found.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use idemkey_powerloss::{Cut, PowerLossFs};
use idemkey_test_support::db::Db;
use idemkey_test_support::process::notes::{ALICE, create_titled};
use idemkey_test_support::process::serve::{Serve, ServeSpec};

use idemkey_test_support::runner::rng::{Rng, env_or};

/// How many times a client sends one key before it gives up (and the campaign fails).
const MAX_ATTEMPTS: usize = 2000;

/// The size and schedule of a campaign, from `IDEMKEY_CRASH_*` variables.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) clients: usize,
    pub(crate) keys: usize,
    pub(crate) kills: usize,
    pub(crate) max_delay_ms: u64,
    pub(crate) lease: String,
}

impl Plan {
    pub(crate) fn from_env() -> Self {
        Self::read("IDEMKEY_CRASH", "KILLS", (100, 30))
    }

    /// The power-loss campaigns' plan, from `IDEMKEY_POWERLOSS_*` variables: `CUTS` is the
    /// number of kills, each followed by a cut. Smaller than the crash campaign's by default,
    /// as each cut also remounts.
    pub(crate) fn powerloss_from_env() -> Self {
        Self::read("IDEMKEY_POWERLOSS", "CUTS", (60, 12))
    }

    /// The plan from `{prefix}_*` variables (`{prefix}_{kills}` the number of kills), with
    /// `(keys, kills)` as the defaults of those two.
    fn read(prefix: &str, kills: &str, (default_keys, default_kills): (u64, u64)) -> Self {
        let var = |name: &str| format!("{prefix}_{name}");
        Self {
            seed: Rng::seed_from_env(&var("SEED")),
            clients: env_or(&var("CLIENTS"), 4) as usize,
            keys: env_or(&var("KEYS"), default_keys) as usize,
            kills: env_or(&var(kills), default_kills) as usize,
            max_delay_ms: env_or(&var("MAX_DELAY_MS"), 10),
            lease: std::env::var(var("LEASE")).unwrap_or_else(|_| "1s".into()),
        }
    }

    pub(crate) fn total(&self) -> usize {
        self.clients * self.keys
    }
}

/// What the killer cuts the power of after each kill: the filesystem under the database, and
/// whatever else runs on it (a database server, killed before the cut and started after it).
pub(crate) trait Power: Send + Sync {
    /// Cuts the power, once no process of the killed server uses the files, and brings the
    /// database back. `Err`: it did not come back (a corrupt cluster), saying why; the
    /// campaign ends there.
    fn cut(&self) -> Result<Cut, String>;
}

impl Power for PowerLossFs {
    fn cut(&self) -> Result<Cut, String> {
        Ok(PowerLossFs::cut(self).unwrap())
    }
}

/// What a client got for one key.
#[derive(Clone, Debug)]
pub(crate) struct Receipt {
    pub(crate) key: String,
    pub(crate) title: String,
    pub(crate) id: String,
}

/// What the clients and the killer share.
#[derive(Default)]
pub(crate) struct Shared {
    addr: RwLock<Option<SocketAddr>>,
    /// Keys whose note a client has received.
    pub(crate) done: AtomicUsize,
    pub(crate) stats: Mutex<BTreeMap<String, u64>>,
    pub(crate) violations: Mutex<Vec<String>>,
    /// Why the database or the server did not come back after a power cut, if it did not:
    /// the clients stop there, and nothing is left to verify.
    pub(crate) down: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn new(addr: SocketAddr) -> Arc<Self> {
        let shared = Self::default();
        *shared.addr.write().unwrap() = Some(addr);
        Arc::new(shared)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr.read().unwrap().unwrap()
    }

    pub(crate) fn count(&self, what: impl Into<String>) {
        self.add(what, 1);
    }

    /// Adds `n` to the stat `what`.
    pub(crate) fn add(&self, what: impl Into<String>, n: u64) {
        *self.stats.lock().unwrap().entry(what.into()).or_default() += n;
    }

    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }

    fn is_down(&self) -> bool {
        self.down.lock().unwrap().is_some()
    }

    fn went_down(&self, why: String) {
        self.count("cut: did not come back");
        *self.down.lock().unwrap() = Some(why);
    }
}

/// One client: creates its keys one after the other, resending each until it gets a 201.
pub(crate) async fn client(
    n: usize,
    plan: Plan,
    mut rng: Rng,
    shared: Arc<Shared>,
) -> Vec<Receipt> {
    let http = reqwest::Client::new();
    let mut receipts = Vec::new();
    for k in 0..plan.keys {
        let key = format!("c{n}-k{k}");
        let title = format!("crash {} {key}", plan.seed);
        let Some(id) = create_until_created(&http, &mut rng, &shared, &key, &title).await else {
            if !shared.is_down() {
                shared.violation(format!("{key}: no 201 after {MAX_ATTEMPTS} attempts"));
            }
            break;
        };
        receipts.push(Receipt { key, title, id });
        shared.done.fetch_add(1, Ordering::SeqCst);
    }
    receipts
}

async fn create_until_created(
    http: &reqwest::Client,
    rng: &mut Rng,
    shared: &Shared,
    key: &str,
    title: &str,
) -> Option<String> {
    for _ in 0..MAX_ATTEMPTS {
        if shared.is_down() {
            return None;
        }
        let timeout = rng.millis(100, 1500);
        let sent = create_titled(http, shared.addr(), ALICE, key, title)
            .timeout(timeout)
            .send()
            .await;
        match sent {
            Ok(response) if response.status() == 201 => {
                let replayed = response.headers().contains_key("idempotent-replayed");
                match response.json::<serde_json::Value>().await {
                    Ok(body) => {
                        shared.count(if replayed {
                            "201 replayed"
                        } else {
                            "201 executed"
                        });
                        return Some(body["id"].as_str().unwrap().to_owned());
                    }
                    Err(_) => shared.count("error: body cut off"),
                }
            }
            Ok(response) => answered(shared, key, response).await,
            Err(error) => shared.count(error_kind(&error)),
        }
        tokio::time::sleep(rng.millis(10, 100)).await;
    }
    None
}

/// Counts a non-201 answer; anything but 409 and 5xx is a violation.
async fn answered(shared: &Shared, key: &str, response: reqwest::Response) {
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let slug = body["type"]
        .as_str()
        .unwrap_or("")
        .rsplit(['/', '#'])
        .next();
    shared.count(format!("{status} {}", slug.unwrap_or("")));
    if status != 409 && status < 500 {
        shared.violation(format!("{key}: {status} {body}"));
    }
}

fn error_kind(error: &reqwest::Error) -> &'static str {
    if error.is_timeout() {
        "error: client timeout"
    } else if error.is_connect() {
        "error: connect"
    } else {
        "error: connection lost"
    }
}

/// Kills the server `plan.kills` times, spread over the clients' progress, each at a random
/// moment; now and then also kills a fresh process during its startup. With `power`, the
/// filesystem under the database, each kill is followed by a power cut, once no process
/// uses its files. Returns the last server. Stops early only if the clients are done first,
/// or if after a cut the database or the server does not come back: then `None`, and
/// [`Shared::down`] says why.
pub(crate) async fn killer(
    spec: ServeSpec,
    plan: Plan,
    mut rng: Rng,
    shared: Arc<Shared>,
    mut server: Serve,
    power: Option<Arc<dyn Power>>,
) -> Option<Serve> {
    // Each kill waits for a random share of its own slice of the keys, then a random delay,
    // so the kills spread over the whole run and land while requests are in flight.
    let slice = (plan.total() / (plan.kills + 1) / 2).max(2) as u64;
    for _ in 0..plan.kills {
        let target = shared.done.load(Ordering::SeqCst) + rng.range(0, slice) as usize;
        if !progressed(&shared, target, plan.total()).await {
            break;
        }
        tokio::time::sleep(rng.millis(0, plan.max_delay_ms)).await;
        let addr = server.addr;
        tokio::task::spawn_blocking(move || server.kill9())
            .await
            .unwrap();
        shared.count("kill: SIGKILL");
        if !cut(power.as_ref(), &shared).await {
            return None;
        }
        if rng.one_in(5) {
            let early = rng.millis(0, 60);
            let spec = spec.clone();
            tokio::task::spawn_blocking(move || kill_during_startup(&spec, addr, early))
                .await
                .unwrap();
            shared.count("kill: SIGKILL during startup");
            if !cut(power.as_ref(), &shared).await {
                return None;
            }
        }
        server = if power.is_some() {
            // After a cut the database may be too damaged for a server to start on it.
            let Some(server) = try_start(spec.clone(), Some(addr)).await else {
                shared.went_down(format!(
                    "the server did not start after a cut: {}",
                    spec.log_tail()
                ));
                return None;
            };
            server
        } else {
            start(spec.clone(), Some(addr)).await
        };
        if server.addr != addr {
            shared.count("restart: new port");
            *shared.addr.write().unwrap() = Some(server.addr);
        }
    }
    Some(server)
}

/// Cuts the power of `power`, if there is one, counting what the cut dropped. The killed
/// process is reaped by now: nothing of it uses the files. False if the database did not
/// come back ([`Shared::down`] says why).
async fn cut(power: Option<&Arc<dyn Power>>, shared: &Shared) -> bool {
    let Some(power) = power.cloned() else {
        return true;
    };
    let cut = tokio::task::spawn_blocking(move || power.cut())
        .await
        .unwrap();
    shared.count("cut: power");
    match cut {
        Ok(cut) => {
            shared.add("cut: bytes dropped", cut.bytes);
            shared.add("cut: entries dropped", cut.entries);
            true
        }
        Err(why) => {
            shared.went_down(format!("the database did not start after a cut: {why}"));
            false
        }
    }
}

/// Waits until `threshold` keys are done; false once every key is.
async fn progressed(shared: &Shared, threshold: usize, total: usize) -> bool {
    let threshold = threshold.min(total - 1);
    for _ in 0..120_000 {
        let done = shared.done.load(Ordering::SeqCst);
        if done >= total {
            return false;
        }
        if done >= threshold {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

fn kill_during_startup(spec: &ServeSpec, addr: SocketAddr, after: Duration) {
    let mut child = spec.spawn(addr);
    std::thread::sleep(after);
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts a server on `addr` (three tries: the old port may still be held), else anywhere.
pub(crate) async fn start(spec: ServeSpec, addr: Option<SocketAddr>) -> Serve {
    let log = spec.clone();
    try_start(spec, addr)
        .await
        .unwrap_or_else(|| panic!("the server did not start: {}", log.log_tail()))
}

/// [`start`], or `None` if the server does not start anywhere.
async fn try_start(spec: ServeSpec, addr: Option<SocketAddr>) -> Option<Serve> {
    tokio::task::spawn_blocking(move || match addr {
        Some(addr) => spec.start_again_on(addr),
        None => spec.start_on(SocketAddr::from(([127, 0, 0, 1], 0))),
    })
    .await
    .unwrap()
}

/// Runs the clients and the killer (cutting `power` after each kill, if given) to the end;
/// returns the last server (`None` if after a cut the database or the server did not come
/// back: [`Shared::down`]) and every receipt.
pub(crate) async fn drive(
    spec: &ServeSpec,
    plan: &Plan,
    power: Option<Arc<dyn Power>>,
) -> (Option<Serve>, Vec<Receipt>, Arc<Shared>) {
    let rng = Rng::new(plan.seed);
    let first = start(spec.clone(), None).await;
    let shared = Shared::new(first.addr);
    let clients: Vec<_> = (0..plan.clients)
        .map(|n| {
            let rng = rng.fork(n as u64 + 1);
            tokio::spawn(client(n, plan.clone(), rng, shared.clone()))
        })
        .collect();
    let killer = killer(
        spec.clone(),
        plan.clone(),
        rng.fork(0),
        shared.clone(),
        first,
        power,
    );
    let server = killer.await;
    let mut receipts = Vec::new();
    for client in clients {
        receipts.extend(client.await.unwrap());
    }
    (server, receipts, shared)
}

/// What the verification found wrong: nothing, in a campaign that passes.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Keys whose acknowledged note is not in the database: an answer a client was given,
    /// lost.
    pub(crate) lost: Vec<String>,
    /// Keys with more than one note: executed twice.
    pub(crate) duplicates: Vec<String>,
    /// Notes under no key a client was given.
    pub(crate) stray_notes: usize,
    /// Keys whose one more retry did not replay the acknowledged id, and what it got.
    pub(crate) not_replayed: Vec<String>,
    /// What is wrong with the records: not one per key, or not completed.
    pub(crate) records: Vec<String>,
}

impl Findings {
    pub(crate) fn is_empty(&self) -> bool {
        self.lost.is_empty()
            && self.duplicates.is_empty()
            && self.stray_notes == 0
            && self.not_replayed.is_empty()
            && self.records.is_empty()
    }
}

/// Every key maps to exactly one note, the one acknowledged; no note is stray; one more retry
/// of every key replays the same id; there is one completed record per key (unless the
/// records are in Redis, `--records-url` in `name`). Returns what does not hold.
pub(crate) async fn verify(db: &Db, server: &Serve, receipts: &[Receipt], name: &str) -> Findings {
    let mut findings = Findings::default();
    let notes = db.notes().await;
    let mut by_title: HashMap<&str, Vec<&str>> = HashMap::new();
    for (id, title) in &notes {
        by_title.entry(title).or_default().push(id);
    }
    for receipt in receipts {
        let ids = by_title
            .get(receipt.title.as_str())
            .cloned()
            .unwrap_or_default();
        if !ids.contains(&receipt.id.as_str()) {
            findings.lost.push(format!(
                "{}: acknowledged {}, found {ids:?}",
                receipt.key, receipt.id
            ));
        }
        if ids.len() > 1 {
            findings
                .duplicates
                .push(format!("{}: notes {ids:?}", receipt.key));
        }
    }
    let acknowledged: usize = receipts
        .iter()
        .map(|receipt| by_title.get(receipt.title.as_str()).map_or(0, Vec::len))
        .sum();
    findings.stray_notes = notes.len() - acknowledged.min(notes.len());
    let client = reqwest::Client::new();
    for receipt in receipts {
        let retry = create_titled(&client, server.addr, ALICE, &receipt.key, &receipt.title)
            .send()
            .await
            .unwrap();
        let status = retry.status();
        let replayed = retry
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|value| value == "true");
        let body: serde_json::Value = retry.json().await.unwrap_or_default();
        if status != 201 || !replayed || body["id"] != receipt.id.as_str() {
            findings.not_replayed.push(format!(
                "{}: acknowledged {}, retry got {status} replayed={replayed} {body}",
                receipt.key, receipt.id
            ));
        }
    }
    let records = db.records().await;
    if name.contains("--records-url") {
        // The records are in Redis: the replays above showed one completed record per key.
        if !records.is_empty() {
            findings
                .records
                .push(format!("{} records in the database", records.len()));
        }
        return findings;
    }
    if records.len() != receipts.len() {
        findings.records.push(format!(
            "{} records for {} keys",
            records.len(),
            receipts.len()
        ));
    }
    let open = records.iter().filter(|(_, state)| *state != 2);
    findings
        .records
        .extend(open.map(|(key, state)| format!("{key}: state {state}, not completed")));
    findings
}
