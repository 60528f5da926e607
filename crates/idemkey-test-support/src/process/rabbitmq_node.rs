//! A RabbitMQ node of a test's own: `rabbitmq-server` on a free port of 127.0.0.1 with a node
//! name, a distribution port, a configuration and directories of its own (the machine's node
//! holds 5672 and 25672 and its configuration pins the listener), killed with SIGKILL and
//! started again on the same directories and port, so a test can crash the broker under a
//! running consumer. Durable queues and persistent messages survive the crash.
//!
//! The node runs as the `rabbitmq` user, as Debian's `rabbitmq-server` runs it (hence root,
//! and the directory given to that user). The node runs under a `sh` watchdog that holds a pipe from
//! this process, as [`crate::process::mysql_server::MariaDb`] does: however this process
//! ends, the node is killed and its directory removed.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::watchdog::{Watchdog, free_port};
use crate::runner::needs::RABBITMQ_SERVER;

/// How long a start (recovery of the queues included) may take before the test fails.
const START_LIMIT: Duration = Duration::from_secs(90);

/// How long a node that listens may take to run its virtual hosts.
const HEALTH_LIMIT: Duration = Duration::from_secs(30);

/// A private RabbitMQ node, killed and its directory removed when dropped.
pub struct RabbitNode {
    /// The AMQP port, on 127.0.0.1, the same across restarts.
    pub port: u16,
    /// Its directory: configuration, queues (`mnesia/`), logs (`log/`).
    pub dir: PathBuf,
    name: String,
    dist_port: u16,
    watchdog: Option<Watchdog>,
}

impl RabbitNode {
    /// Starts a node on free ports; panics, with its log, if it does not start.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idemkey-rabbitmq-")
            .tempdir()
            .unwrap()
            .keep();
        let mut node = Self {
            port: free_port(),
            dir,
            name: String::new(),
            dist_port: free_port(),
            watchdog: None,
        };
        node.name = format!("idemkey-{}@localhost", node.port);
        let config = format!("listeners.tcp.default = 127.0.0.1:{}\n", node.port);
        std::fs::write(node.dir.join("node.conf"), config).unwrap();
        std::fs::write(node.dir.join("plugins"), "[].\n").unwrap();
        give_to_rabbitmq(&node.dir);
        node.restart();
        node
    }

    /// Its URL, as the default user `guest` (allowed from 127.0.0.1).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Kills the node with SIGKILL, as a crash would, keeps its directory, and waits until
    /// every process of it is gone.
    pub fn kill(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop_keeping_dir();
        }
    }

    /// Starts the node again on the same directories and port; waits until it takes
    /// connections.
    pub fn restart(&mut self) {
        // A node crashed under load sometimes comes back with its virtual host down (every
        // connection refused with INTERNAL_ERROR): crashed and started again, as an operator
        // would.
        for _ in 0..3 {
            if self.spawn() {
                return;
            }
        }
        panic!("the RabbitMQ node did not start:\n{}", self.log_tail());
    }

    /// [`Self::kill`], then [`Self::restart`].
    pub fn crash_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// Stops the node as an operator would (`rabbitmqctl stop`), then starts it again.
    ///
    /// Call it once the queues a test needs are declared, before crashing the node. RabbitMQ
    /// 3.10.8 crashed a few seconds after declaring a quorum queue brought it back, here, under
    /// a fresh Raft member with an empty log and no peers (the old member's directory still
    /// holding the data, the members' name registry `names.dets` reported repaired): a
    /// follower that never elects itself, every consumer of the queue refused with
    /// `INTERNAL_ERROR`, for good. With this clean restart between the declaration and the
    /// crashes it has not happened again.
    pub fn stop_and_restart(&mut self) {
        let stopped = self.as_rabbitmq("rabbitmqctl", &["stop"]);
        assert!(stopped, "rabbitmqctl stop failed:\n{}", self.log_tail());
        self.kill();
        self.restart();
    }

    /// The last 40 lines of the startup output and of the node's own log, for failure
    /// messages.
    pub fn log_tail(&self) -> String {
        let node_log = self.dir.join("log").join(format!("{}.log", self.name));
        [self.dir.join("server.out"), node_log]
            .iter()
            .map(|path| {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(40)..].join("\n");
                format!("--- {}\n{tail}", path.display())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Spawns the node under its watchdog; whether it listens in time. The watchdog kills
    /// the node with SIGKILL when this process closes the pipe.
    fn spawn(&mut self) -> bool {
        // The node in a session of its own, run as `rabbitmq` by `setpriv`, which forks
        // nothing (Debian's `rabbitmq-server` goes through `su`, which puts the node in another
        // session), so that it dies as a group; the watchdog waits for every process of it to
        // end, since until the VM is gone it holds the port, the node's name and its queues'
        // files, and a new node of the same name would stop at once.
        let script = r#"dir="$1"; cd /var/lib/rabbitmq
HOME=/var/lib/rabbitmq setsid setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups \
    "$2" >>"$dir/server.out" 2>&1 & pid=$!
read _eof; kill -9 "-$pid" 2>/dev/null
while kill -0 "-$pid" 2>/dev/null; do sleep 0.05; done
[ -e "$dir/.keep" ] || rm -rf "$dir""#;
        let path = |name: &str| self.dir.join(name).display().to_string();
        let envs = [
            ("RABBITMQ_NODENAME", self.name.clone()),
            ("RABBITMQ_DIST_PORT", self.dist_port.to_string()),
            // The path without `.conf`, as RabbitMQ wants it.
            ("RABBITMQ_CONFIG_FILE", path("node")),
            ("RABBITMQ_MNESIA_BASE", path("mnesia")),
            ("RABBITMQ_LOG_BASE", path("log")),
            ("RABBITMQ_ENABLED_PLUGINS_FILE", path("plugins")),
        ];
        let args = [self.dir.as_os_str(), std::ffi::OsStr::new(RABBITMQ_SERVER)];
        self.watchdog = Some(Watchdog::spawn(script, &args, &self.dir, &envs));
        let deadline = Instant::now() + START_LIMIT;
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return self.vhosts_run(Instant::now() + HEALTH_LIMIT);
            }
            if self.exited() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// Whether the node's virtual hosts run before `deadline`, as `rabbitmq-diagnostics
    /// check_virtual_hosts` says; if not, the node is killed.
    fn vhosts_run(&mut self, deadline: Instant) -> bool {
        while Instant::now() < deadline {
            if self.as_rabbitmq("rabbitmq-diagnostics", &["check_virtual_hosts"]) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        self.kill();
        false
    }

    /// Whether `program` (one of RabbitMQ's command-line tools) succeeds with `args` against
    /// the node, run as `rabbitmq`, whose Erlang cookie the node has.
    fn as_rabbitmq(&self, program: &str, args: &[&str]) -> bool {
        Command::new("setpriv")
            .args(["--reuid=rabbitmq", "--regid=rabbitmq", "--init-groups"])
            .args([program, "-q", "-n", &self.name])
            .args(args)
            .current_dir("/var/lib/rabbitmq")
            .env("HOME", "/var/lib/rabbitmq")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Whether the watchdog, hence the node, has ended (say, a port was taken).
    fn exited(&mut self) -> bool {
        self.watchdog.as_mut().is_some_and(Watchdog::exited)
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        // A test failing with the node up: what the node said is the first thing to read,
        // and its directory (logs, queues) is kept for a closer look.
        if std::thread::panicking() {
            eprintln!(
                "the RabbitMQ node {} at the failure, its directory kept:\n{}",
                self.name,
                self.log_tail()
            );
            if let Some(watchdog) = self.watchdog.take() {
                watchdog.stop_keeping_dir();
            }
            return;
        }
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.stop();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Gives `dir` to the `rabbitmq` user, which the node runs as.
fn give_to_rabbitmq(dir: &Path) {
    let given = Command::new("chown")
        .args(["-R", "rabbitmq:rabbitmq"])
        .arg(dir)
        .status()
        .is_ok_and(|status| status.success());
    assert!(given, "chown rabbitmq {} failed", dir.display());
}
