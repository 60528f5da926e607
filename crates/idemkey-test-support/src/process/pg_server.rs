//! A PostgreSQL server of a test's own: `initdb` in a temporary directory, or in a directory
//! the test chooses (a power-loss filesystem), and `pg_ctl` on a free port of 127.0.0.1, run
//! as the `postgres` user, so a test can crash, stop, kill and start the database under
//! running processes. Needs PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`, the
//! `pg_server` need) and, as root, the `postgres` user.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::process::redis::free_port;
use crate::runner::needs::pg_server_bin;

/// How long [`Cluster::kill9`] waits for the killed processes to die.
const GONE_LIMIT: Duration = Duration::from_secs(60);

/// A PostgreSQL server of the test's own, stopped when dropped.
pub struct Cluster {
    bin: PathBuf,
    /// The socket's directory and the server's log, owned by `postgres`: always a temporary
    /// directory of the cluster's own, so that they stay off the data's filesystem (a log
    /// there would be cut with the data).
    run: tempfile::TempDir,
    data: PathBuf,
    port: u16,
}

impl Cluster {
    /// Makes the data directory in a temporary directory and starts the server. `initdb
    /// --no-sync`: the cluster does not outlive the machine, so its files need no sync.
    pub fn start() -> Self {
        let run = run_dir();
        let data = run.path().join("data");
        Self::init(run, data, &["--no-sync"])
    }

    /// Makes the data directory `dir/data` and starts the server; `dir` is an existing
    /// directory, such as the root of a power-loss filesystem. Everything is synced: the
    /// data directory's entry, owner and mode (0700, `postgres`), and `initdb` syncs every
    /// file and directory it made (no `--no-sync`), so the new cluster survives a power cut.
    /// The server runs with PostgreSQL's defaults (`fsync`, `synchronous_commit` and
    /// `full_page_writes` on, `wal_sync_method` `fdatasync`).
    pub fn start_in(dir: &Path) -> Self {
        let data = dir.join("data");
        std::fs::create_dir(&data).unwrap();
        chown_to_postgres(&data);
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        sync_dir(&data);
        sync_dir(dir);
        Self::init(run_dir(), data, &[])
    }

    fn init(run: tempfile::TempDir, data: PathBuf, initdb: &[&str]) -> Self {
        let bin = pg_server_bin().expect("PostgreSQL server binaries under /usr/lib/postgresql");
        let port = free_port();
        let cluster = Self {
            bin,
            run,
            data,
            port,
        };
        let mut args = vec!["-A", "trust", "-U", "postgres"];
        args.extend_from_slice(initdb);
        let init = cluster.as_postgres("initdb", &args);
        assert!(init, "initdb failed (is there a `postgres` user?)");
        assert!(
            cluster.pg_ctl(&["start"]),
            "the private PostgreSQL did not start: {}",
            cluster.log_tail()
        );
        cluster
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs a server binary as `postgres` on this cluster's data directory.
    fn as_postgres(&self, tool: &str, args: &[&str]) -> bool {
        let program = self.bin.join(tool);
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&program)
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    fn log(&self) -> PathBuf {
        self.run.path().join("log")
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.run.path().display()
        );
        let log = self.log();
        let log = log.to_str().unwrap();
        let mut all = vec!["-w", "-l", log, "-o", options.as_str()];
        all.extend_from_slice(args);
        self.as_postgres("pg_ctl", &all)
    }

    /// The server's log so far (its last 30 lines), for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Kills the server the way a crash would (no checkpoint, recovery at start) and starts it.
    pub fn crash_restart(&self) {
        assert!(
            self.pg_ctl(&["-m", "immediate", "restart"]),
            "restart failed"
        );
    }

    /// Stops the server the way a crash would, and leaves it stopped.
    pub fn crash_stop(&self) {
        assert!(self.pg_ctl(&["-m", "immediate", "stop"]), "stop failed");
    }

    /// Starts the stopped server again, on the same data and port.
    pub fn start_again(&self) {
        assert!(self.try_start_again(), "start failed: {}", self.log_tail());
    }

    /// Starts the stopped (or killed) server again, on the same data and port, and waits
    /// until it accepts connections (crash recovery included); false if it did not start,
    /// as on a corrupt data directory ([`Cluster::log_tail`] says why).
    pub fn try_start_again(&self) -> bool {
        self.clear_dead_locks();
        self.pg_ctl(&["start"])
    }

    /// Removes the lock files (`postmaster.pid`, the socket's `.lock`) of a postmaster that
    /// is dead but not yet reaped: PostgreSQL takes a zombie's pid for a live postmaster and
    /// would refuse to start, where after a real power cut no such process is left. A lock
    /// of a process that is gone PostgreSQL clears itself; one of a live process stays.
    fn clear_dead_locks(&self) {
        let socket_lock = self.run.path().join(format!(".s.PGSQL.{}.lock", self.port));
        for lock in [self.data.join("postmaster.pid"), socket_lock] {
            let Ok(file) = std::fs::read_to_string(&lock) else {
                continue;
            };
            let Some(pid) = file.lines().next().and_then(|pid| pid.trim().parse().ok()) else {
                continue;
            };
            if state(Pid::from_raw(pid)) == Some('Z') {
                let _ = std::fs::remove_file(&lock);
            }
        }
    }

    /// SIGKILLs the postmaster and every process it started, as a power cut stops them: no
    /// shutdown, no checkpoint, not one more write (an immediate stop is none of these: it
    /// signals the processes, which exit on their own). Waits until they are dead, their
    /// files closed (zombies, which their new parent reaps in its own time). The postmaster
    /// is stopped first (SIGSTOP), so that it starts no process while its children are
    /// killed. Nothing to do if the server is not running.
    pub fn kill9(&self) {
        let Some(postmaster) = self.postmaster() else {
            return;
        };
        let _ = kill(postmaster, Signal::SIGSTOP);
        // Stopped, not only signalled: a fork under way is finished, its child listed below.
        poll(GONE_LIMIT, || {
            state(postmaster).is_none_or(|state| state == 'T' || state == 'Z')
        });
        let mut pids = children(postmaster);
        for &child in &pids {
            let _ = kill(child, Signal::SIGKILL);
        }
        let _ = kill(postmaster, Signal::SIGKILL);
        pids.push(postmaster);
        // Dead: a zombie holds no file (nor memory, nor directory) of the cluster any more.
        let dead = poll(GONE_LIMIT, || {
            pids.iter()
                .all(|&pid| state(pid).is_none_or(|state| state == 'Z'))
        });
        assert!(
            dead,
            "the killed PostgreSQL processes {pids:?} are still alive"
        );
    }

    /// The running postmaster: the pid in `postmaster.pid`, if a process of that pid runs
    /// the `postgres` program on this data directory (a stale file's pid may be another's).
    fn postmaster(&self) -> Option<Pid> {
        let file = std::fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        let pid: i32 = file.lines().next()?.trim().parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        let data = self.data.to_str()?;
        (cmdline.contains("postgres") && cmdline.contains(data)).then_some(Pid::from_raw(pid))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

/// A temporary directory owned by `postgres`, for the socket and the log (and, for
/// [`Cluster::start`], the data directory `initdb` makes in it).
fn run_dir() -> tempfile::TempDir {
    let run = tempfile::tempdir().unwrap();
    // initdb refuses to run as root: the directories belong to `postgres`.
    chown_to_postgres(run.path());
    run
}

fn chown_to_postgres(path: &Path) {
    let status = Command::new("chown")
        .arg("postgres:postgres")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "chown postgres {}", path.display());
}

/// `fsync` of a directory: its entries, owner and mode become durable.
fn sync_dir(dir: &Path) {
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`, ...), `None` if there is none.
fn state(pid: Pid) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// The processes whose parent is `parent`.
fn children(parent: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<i32>().ok());
            ppid == Some(parent.as_raw())
        })
        .map(Pid::from_raw)
        .collect()
}

/// Polls `check` every 5 ms until it holds (true) or `limit` has passed (false).
fn poll(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let polls = limit.as_millis() / 5;
    for _ in 0..polls {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    check()
}
