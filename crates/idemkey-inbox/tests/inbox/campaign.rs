//! A crash campaign: the example consumer (`examples/orders`) as a real process, killed with
//! SIGKILL again and again while orders are published to a broker of the test's own (a
//! nats-server with JetStream, or a RabbitMQ node), which is itself crashed and restarted
//! under the running consumer; afterwards every order shipped exactly once and every shipment
//! seen downstream under exactly one id.
//!
//! Sizes: `IDEMKEY_INBOX_ORDERS` (2,000), `IDEMKEY_INBOX_KILLS` (10), `IDEMKEY_INBOX_RESTARTS`
//! (2); the kills' times from `IDEMKEY_INBOX_SEED`.

mod brokers;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemkey_test_support::runner::rng::{Rng, env_or};

use self::brokers::{Broker, Downstream, Kind, Orders};

/// The example consumer as a process, its log (stderr) in a file of the test's own.
struct Consumer {
    args: Vec<String>,
    child: Option<Child>,
    log: tempfile::NamedTempFile,
}

impl Consumer {
    fn new(broker: &str, database: &str, mode: &str) -> Self {
        let args = [
            "--broker",
            broker,
            "--database-url",
            database,
            "--ack-wait-ms",
            "1000",
            "--mode",
            mode,
        ];
        Self {
            args: args.map(str::to_owned).to_vec(),
            child: None,
            log: tempfile::NamedTempFile::new().unwrap(),
        }
    }

    /// Starts it and waits for its ready line. A start that fails is tried again, twice,
    /// its log printed: what the campaign checks is each order's fate, and the example already
    /// waits 30 s for a broker that is recovering; a start that fails three times fails the
    /// test with the log.
    fn start(&mut self) {
        for attempt in 1..=3 {
            match self.try_start() {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                Err(failure) if attempt < 3 => eprintln!("inbox campaign: {failure}"),
                Err(failure) => panic!("{failure}"),
            }
        }
    }

    fn try_start(&mut self) -> Result<Child, String> {
        let mut child = Command::new(example("orders"))
            .args(&self.args)
            .env("RUST_LOG", "warn")
            // Its error chain without a backtrace, if it fails to start.
            .env("RUST_BACKTRACE", "0")
            .env("RUST_LIB_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(self.log.path())
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if line.starts_with("ready") {
            return Ok(child);
        }
        let status = child.wait().unwrap();
        let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "the consumer said {line:?} and ended ({status}); the end of its log:\n{}",
            tail.join("\n")
        ))
    }

    /// SIGKILL: whatever it was doing stops there.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An example of this package, built by `cargo test` beside its test binaries (a run of this
/// test binary alone, `--test inbox`, builds no example: build it first).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap();
    let path = target.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo build -p idemkey-inbox --example {name}",
        path.display()
    );
    path
}

/// The shipments, and the distinct orders shipped.
const SHIPMENTS: &str = "SELECT count(*), count(DISTINCT order_id) FROM shipments";
/// The outbox messages left.
const OUTBOX: &str = "SELECT count(*) FROM idemkey_outbox";

/// What [`tally`] counts, on a pool of `$pool` (the drivers share no type).
macro_rules! counts {
    ($pool:ty, $database:expr, $lease:expr) => {{
        let pool = <$pool>::connect($database).await.unwrap();
        let (rows, distinct) = sqlx::query_as(SHIPMENTS).fetch_one(&pool).await.unwrap();
        // Lease mode publishes directly: no outbox.
        let left = match $lease {
            true => 0,
            false => sqlx::query_scalar(OUTBOX).fetch_one(&pool).await.unwrap(),
        };
        pool.close().await;
        (rows, distinct, left)
    }};
}

/// What a campaign counts in the consumer's database: shipments, distinct orders shipped, and
/// outbox messages left.
async fn tally(database: &str, mode: &str) -> (i64, i64, i64) {
    let lease = mode == "lease";
    if database.starts_with("mysql") {
        counts!(sqlx::MySqlPool, database, lease)
    } else if database.starts_with("postgres") {
        counts!(sqlx::PgPool, database, lease)
    } else {
        counts!(sqlx::SqlitePool, database, lease)
    }
}

/// Held by the campaign that runs a RabbitMQ node.
static RABBITMQ_NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The campaign on a `kind` broker of its own, against the consumer's `database`, in `mode`.
async fn campaign(kind: Kind, database: &str, mode: &str) {
    let (orders, kills, restarts) = (
        env_or("IDEMKEY_INBOX_ORDERS", 2000),
        env_or("IDEMKEY_INBOX_KILLS", 10),
        env_or("IDEMKEY_INBOX_RESTARTS", 2),
    );
    let mut rng = Rng::new(Rng::seed_from_env("IDEMKEY_INBOX_SEED"));
    // One RabbitMQ node at a time: on two cores, nodes crashed and recovering side by side
    // with the rest of the tests are what makes a recovery slow.
    let _one_node = match kind {
        Kind::Rabbitmq => Some(RABBITMQ_NODES.lock().await),
        Kind::JetStream => None,
    };
    let mut broker = Broker::start(kind);
    let mut consumer = Consumer::new(&broker.url(), database, mode);
    consumer.start();
    tokio::task::block_in_place(|| broker.settle());

    let mut publisher = Orders::new(kind, broker.url());
    let publishing = tokio::spawn(async move {
        for n in 0..orders {
            publisher.publish(n).await;
            // About one in ten published again under its id, as a publisher that lost a
            // confirm does.
            if n % 10 == 3 {
                publisher.publish(n).await;
            }
        }
    });
    // The broker's crashes fall evenly among the consumer's kills, under a running consumer,
    // which connects again by itself.
    let restart_at: Vec<u64> = (1..=restarts).map(|r| r * kills / (restarts + 1)).collect();
    for kill in 0..kills {
        tokio::time::sleep(rng.millis(100, 400)).await;
        if restart_at.contains(&kill) {
            tokio::task::block_in_place(|| broker.crash_restart());
            // Long enough for the consumer to connect again by itself.
            tokio::time::sleep(rng.millis(2000, 4000)).await;
        }
        consumer.kill();
        consumer.start();
    }
    publishing.await.unwrap();

    let settled = Instant::now() + Duration::from_secs(120);
    let mut downstream = Downstream::default();
    let ((rows, distinct, left), (messages, ids)) = loop {
        let counts = tally(database, mode).await;
        let seen = downstream.read(&broker).await.unwrap_or_default();
        let done = counts.1 as u64 == orders && counts.2 == 0 && seen.1 >= orders;
        if done || Instant::now() > settled {
            break (counts, seen);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "inbox campaign, {kind:?}, {mode} mode on {}: {orders} orders ({} published twice), {kills} consumer kills, {restarts} broker crashes: {rows} shipments, {distinct} distinct, {messages} messages downstream under {ids} ids, {left} left in the outbox",
        database.split(':').next().unwrap_or(""),
        orders.div_ceil(10)
    );
    assert_eq!(distinct as u64, orders, "orders missing");
    assert_eq!(rows, distinct, "orders shipped twice");
    assert_eq!(left, 0, "outbox messages never published");
    assert_eq!(
        ids, orders,
        "shipments published under other ids, or missing downstream"
    );
}

/// A SQLite file of the test's own, and its URL.
fn sqlite() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("orders.db").display());
    (dir, url)
}

/// A MySQL database of the test's own on the tests' server, its URL.
async fn mysql() -> String {
    let base = idemkey_test_support::runner::needs::mysql_url();
    let name = idemkey_test_support::db::mysql::create_database().await;
    let server = base
        .rsplit_once('/')
        .map_or(base.as_str(), |(server, _)| server);
    format!("{server}/{name}")
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server])]
async fn on_jetstream_and_sqlite_the_example_consumer_ships_each_order_once_through_crashes() {
    let (_dir, database) = sqlite();
    campaign(Kind::JetStream, &database, "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server])]
async fn on_jetstream_in_lease_mode_the_example_consumer_ships_each_order_once_by_derived_keys() {
    let (_dir, database) = sqlite();
    campaign(Kind::JetStream, &database, "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, postgres])]
async fn on_jetstream_and_postgres_the_example_consumer_ships_each_order_once_through_crashes() {
    let schema = idemkey_test_support::db::pg::Schema::create(
        &idemkey_test_support::runner::needs::postgres_url(),
    )
    .await;
    campaign(Kind::JetStream, &schema.url(), "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, postgres])]
async fn on_jetstream_in_lease_mode_on_postgres_the_example_consumer_ships_each_order_once() {
    let schema = idemkey_test_support::db::pg::Schema::create(
        &idemkey_test_support::runner::needs::postgres_url(),
    )
    .await;
    campaign(Kind::JetStream, &schema.url(), "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, mysql])]
async fn on_jetstream_and_mysql_the_example_consumer_ships_each_order_once_through_crashes() {
    campaign(Kind::JetStream, &mysql().await, "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq_server])]
async fn on_rabbitmq_and_sqlite_the_example_consumer_ships_each_order_once_through_crashes() {
    let (_dir, database) = sqlite();
    campaign(Kind::Rabbitmq, &database, "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq_server])]
async fn on_rabbitmq_in_lease_mode_the_example_consumer_ships_each_order_once_by_derived_keys() {
    let (_dir, database) = sqlite();
    campaign(Kind::Rabbitmq, &database, "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq_server, postgres])]
async fn on_rabbitmq_and_postgres_the_example_consumer_ships_each_order_once_through_crashes() {
    let schema = idemkey_test_support::db::pg::Schema::create(
        &idemkey_test_support::runner::needs::postgres_url(),
    )
    .await;
    campaign(Kind::Rabbitmq, &schema.url(), "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq_server, postgres])]
async fn on_rabbitmq_in_lease_mode_on_postgres_the_example_consumer_ships_each_order_once() {
    let schema = idemkey_test_support::db::pg::Schema::create(
        &idemkey_test_support::runner::needs::postgres_url(),
    )
    .await;
    campaign(Kind::Rabbitmq, &schema.url(), "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [rabbitmq_server, mysql])]
async fn on_rabbitmq_and_mysql_the_example_consumer_ships_each_order_once_through_crashes() {
    campaign(Kind::Rabbitmq, &mysql().await, "atomic").await;
}
