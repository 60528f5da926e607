//! A crash campaign: the example consumer (`examples/orders.rs`) as a real process, killed with
//! SIGKILL again and again while orders are published to a broker of the test's own, which is
//! itself killed and restarted; afterwards every order shipped exactly once and every shipment
//! published downstream exactly once.
//!
//! Sizes: `IDEMKEY_INBOX_ORDERS` (2,000), `IDEMKEY_INBOX_KILLS` (10), `IDEMKEY_INBOX_RESTARTS`
//! (2); the kills' times from `IDEMKEY_INBOX_SEED`.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, Context};
use idemkey_test_support::runner::rng::{Rng, env_or};

/// A nats-server with JetStream of the test's own, on a port and a store directory that a
/// restart keeps.
struct Broker {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl Broker {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Self::spawn(dir, port);
        Self {
            port,
            dir: dir.to_owned(),
            child,
        }
    }

    fn spawn(dir: &Path, port: u16) -> Child {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_port(port);
        child
    }

    /// A crash: SIGKILL, then the same server again on its store.
    fn restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.child = Self::spawn(&self.dir, self.port);
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The example consumer as a process.
struct Consumer {
    args: Vec<String>,
    child: Option<Child>,
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
        }
    }

    /// Starts it and waits for its ready line.
    fn start(&mut self) {
        let mut child = Command::new(example("orders"))
            .args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("ready"), "the consumer said {line:?}");
        self.child = Some(child);
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

/// Publishes order `n` under `Nats-Msg-Id: order-n`, again until the stream has it (a broker
/// restart in between is a publish that failed, or that succeeded and lost its ack).
async fn publish(url: &str, n: u64) {
    loop {
        if let Ok(js) = jetstream_of(url).await {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", format!("order-{n}").as_str());
            let payload = format!(r#"{{"order_id":{n}}}"#).into_bytes().into();
            if let Ok(ack) = js.publish_with_headers("orders", headers, payload).await
                && let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), ack).await
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn jetstream_of(url: &str) -> Result<Context, async_nats::ConnectError> {
    Ok(jetstream::new(async_nats::connect(url).await?))
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

/// The campaign against the consumer's `database`, in `mode`.
async fn campaign(database: &str, mode: &str) {
    let (orders, kills, restarts) = (
        env_or("IDEMKEY_INBOX_ORDERS", 2000),
        env_or("IDEMKEY_INBOX_KILLS", 10),
        env_or("IDEMKEY_INBOX_RESTARTS", 2),
    );
    let mut rng = Rng::new(Rng::seed_from_env("IDEMKEY_INBOX_SEED"));
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(&dir.path().join("broker"));
    let mut consumer = Consumer::new(&broker.url(), database, mode);
    consumer.start();

    let url = broker.url();
    let publisher = tokio::spawn(async move {
        for n in 0..orders {
            publish(&url, n).await;
            // About one in ten published again under its id, as a publisher that lost a
            // confirm does.
            if n % 10 == 3 {
                publish(&url, n).await;
            }
        }
    });
    // The broker's restarts fall evenly among the consumer's kills, each with a kill.
    let restart_at: Vec<u64> = (1..=restarts).map(|r| r * kills / (restarts + 1)).collect();
    for kill in 0..kills {
        tokio::time::sleep(rng.millis(100, 400)).await;
        consumer.kill();
        if restart_at.contains(&kill) {
            broker.restart();
        }
        consumer.start();
    }
    publisher.await.unwrap();

    let settled = Instant::now() + Duration::from_secs(120);
    let ((rows, distinct, left), shipped) = loop {
        let counts = tally(database, mode).await;
        let js = jetstream_of(&broker.url()).await.unwrap();
        let mut stream = js.get_stream("shipped").await.unwrap();
        let shipped = stream.info().await.unwrap().state.messages;
        let done = counts.1 as u64 == orders && counts.2 == 0 && shipped >= orders;
        if done || Instant::now() > settled {
            break (counts, shipped);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!(
        "inbox campaign, {mode} mode on {}: {orders} orders ({} published twice), {kills} consumer kills, {restarts} broker restarts: {rows} shipments, {distinct} distinct, {shipped} published downstream, {left} left in the outbox",
        database.split(':').next().unwrap_or(""),
        orders.div_ceil(10)
    );
    assert_eq!(distinct as u64, orders, "orders missing");
    assert_eq!(rows, distinct, "orders shipped twice");
    assert_eq!(left, 0, "outbox messages never published");
    assert_eq!(
        shipped, orders,
        "shipments published twice or missing downstream"
    );
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server])]
async fn on_sqlite_the_example_consumer_ships_each_order_once_through_kills_and_broker_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("orders.db").display());
    campaign(&database, "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server])]
async fn in_lease_mode_the_example_consumer_ships_each_order_once_by_its_derived_keys() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("orders.db").display());
    campaign(&database, "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, postgres])]
async fn on_postgres_the_example_consumer_ships_each_order_once_through_kills_and_broker_restarts()
{
    let base = idemkey_test_support::runner::needs::postgres_url();
    let schema = idemkey_test_support::db::pg::Schema::create(&base).await;
    campaign(&schema.url(), "atomic").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, postgres])]
async fn in_lease_mode_on_postgres_the_example_consumer_ships_each_order_once() {
    let base = idemkey_test_support::runner::needs::postgres_url();
    let schema = idemkey_test_support::db::pg::Schema::create(&base).await;
    campaign(&schema.url(), "lease").await;
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [nats_server, mysql])]
async fn on_mysql_the_example_consumer_ships_each_order_once_through_kills_and_broker_restarts() {
    let base = idemkey_test_support::runner::needs::mysql_url();
    let name = idemkey_test_support::db::mysql::create_database().await;
    let server = base
        .rsplit_once('/')
        .map_or(base.as_str(), |(server, _)| server);
    campaign(&format!("{server}/{name}"), "atomic").await;
}
