//! A nats-server with JetStream of a test's own: a free port of 127.0.0.1 and a store
//! directory that a restart keeps (file storage), killed with SIGKILL and started again, so
//! a test can crash the broker under a running consumer.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a start (recovery of the streams included) may take before the test fails.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A private nats-server, killed and its directory removed when dropped.
pub struct NatsServer {
    /// The port it listens on, on 127.0.0.1, the same across restarts.
    pub port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl NatsServer {
    /// Starts a server with JetStream on a free port; panics if it does not listen in time.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("idemkey-nats-")
            .tempdir()
            .unwrap();
        let port = super::watchdog::free_port();
        let child = spawn(&dir.path().join("store"), port);
        Self { port, dir, child }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// A crash: SIGKILL, then the same server again on its store and port.
    pub fn crash_restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.child = spawn(&self.dir.path().join("store"), self.port);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `nats-server -js` on `port` with its store in `store`, once it listens.
fn spawn(store: &std::path::Path, port: u16) -> Child {
    let mut child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server on the PATH");
    let deadline = Instant::now() + START_LIMIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            panic!("nats-server did not listen on {port}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}
