//! `redis-server` processes of a test's own, a three-master cluster of them, a TLS server
//! with its certificates, and the standalone server the Redis tests run against.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A port free now, whose cluster bus port (+10000) is free too.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A `redis-server` of the tests' own. It runs under a `sh` watchdog that holds a pipe from
/// this process: when this process ends, however it ends (even by SIGKILL), the pipe closes
/// and the watchdog kills the server and deletes its directory. No unsafe `prctl` needed.
pub struct RedisServer {
    /// The plain port.
    pub port: u16,
    /// Its directory (`--dir`): its log, AOF and cluster config.
    pub dir: PathBuf,
    /// The server program: `redis-server`, or a Valkey's `valkey-server`.
    program: String,
    args: Vec<String>,
    watchdog: Option<(Child, ChildStdin)>,
}

impl RedisServer {
    /// Starts a `redis-server` on a free port in a directory of its own, with `extra` arguments.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_program("redis-server", extra)
    }

    /// Starts `program` (a Redis or Valkey server) as [`Self::start`] does.
    pub fn start_program(program: &str, extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idemkey-redis-")
            .tempdir()
            .unwrap()
            .keep();
        let mut server = Self {
            port: 0,
            dir,
            program: program.to_owned(),
            args: extra.iter().map(|s| (*s).to_owned()).collect(),
            watchdog: None,
        };
        // Another process may take the free port first: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start");
    }

    /// Starts the server process on `self.port`; whether it answers within 5 s.
    fn spawn(&mut self) -> bool {
        let script = r#"dir="$1"; program="$2"; shift 2; "$program" "$@" >"$dir/server.log" 2>&1 & pid=$!
read _eof; kill -9 "$pid" 2>/dev/null; wait "$pid"; [ -e "$dir/.keep" ] || rm -rf "$dir""#;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(&self.dir)
            .arg(&self.program)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--protected-mode", "no"])
            .args(&self.args)
            .stdin(Stdio::piped())
            .spawn()
            .expect("sh on the PATH");
        let stdin = child.stdin.take().unwrap();
        self.watchdog = Some((child, stdin));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).trim() == "PONG" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Kills the server at once (SIGKILL), keeping its directory, and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            std::fs::write(self.dir.join(".keep"), b"").unwrap();
            drop(stdin);
            child.wait().unwrap();
            std::fs::remove_file(self.dir.join(".keep")).unwrap();
        }
    }

    /// Starts the server again, on the same port and in the same directory.
    pub fn restart(&mut self) {
        assert!(self.spawn(), "redis-server did not restart");
    }

    /// `redis://` at its plain port.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How many times the server ran `command` (lower case), from `INFO commandstats`.
    pub fn calls(&self, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    }

    /// Runs `redis-cli` against this server; its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.watchdog.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// Runs `redis-cli` against the server at `port`; its stdout.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli on the PATH");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Three masters, no replicas, started once per test process and shared by its cluster tests.
/// They live in a static, which is never dropped: their watchdogs end them with the process.
pub struct Cluster {
    /// The masters.
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// The cluster of this test process, started on first use.
    pub fn get() -> &'static Cluster {
        static CLUSTER: OnceLock<Cluster> = OnceLock::new();
        CLUSTER.get_or_init(Self::start)
    }

    fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let conf = Path::new("nodes.conf").to_owned();
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf.to_str().unwrap(),
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "cluster create: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { nodes }
    }

    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

/// A CA and a server certificate for `localhost` and 127.0.0.1, signed by it.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes them with `openssl` in a directory of their own.
    pub fn make() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=idemkey-test-ca -keyout ca.key -out ca.crt
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout server.key -out server.csr
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile ext.cnf -out server.crt"#;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .output()
            .expect("sh and openssl on the PATH");
        assert!(out.status.success(), "{out:?}");
        Self { dir }
    }

    /// The path of `ca.crt`, `server.crt` or `server.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA certificate, PEM.
    pub fn ca(&self) -> Vec<u8> {
        std::fs::read(self.path("ca.crt")).unwrap()
    }
}

/// A server with a TLS port (besides the plain one the helpers use); the `rediss://` URL.
pub fn tls_server(certs: &Certificates) -> (RedisServer, String) {
    let port = free_port().to_string();
    let arg = |path: PathBuf| path.to_str().unwrap().to_owned();
    let (cert, key, ca) = (
        arg(certs.path("server.crt")),
        arg(certs.path("server.key")),
        arg(certs.path("ca.crt")),
    );
    let server = RedisServer::start(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ]);
    (server, format!("rediss://127.0.0.1:{port}"))
}
