//! What a test may need beyond the workspace: a server it does not start itself, a program,
//! or root. Each need is probed once per process; the runner ([`crate::runner::trials`]) ignores a
//! test whose need is missing, except in CI, where the test runs and fails on [`Need::require`].

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The variable naming the PostgreSQL server the tests run against.
pub const PG_URL_ENV: &str = "IDEMKEY_TEST_PG_URL";
/// The PostgreSQL server used when [`PG_URL_ENV`] is not set and one answers here.
pub const PG_DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// The variable naming the MySQL or MariaDB server the tests run against.
pub const MYSQL_URL_ENV: &str = "IDEMKEY_TEST_MYSQL_URL";
/// The MySQL or MariaDB server used when [`MYSQL_URL_ENV`] is not set and one answers here.
pub const MYSQL_DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";
/// The variable naming the standalone Redis server the tests run against.
pub const REDIS_URL_ENV: &str = "IDEMKEY_TEST_REDIS_URL";
/// The standalone Redis server used when [`REDIS_URL_ENV`] is not set and one answers here.
pub const REDIS_DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// The variable naming the NATS server (with JetStream) the tests run against.
pub const NATS_URL_ENV: &str = "IDEMKEY_TEST_NATS_URL";
/// The NATS server used when [`NATS_URL_ENV`] is not set and one answers here.
pub const NATS_DEFAULT_URL: &str = "nats://127.0.0.1:4222";
/// The variable naming the RabbitMQ server (AMQP 0-9-1) the tests run against.
pub const AMQP_URL_ENV: &str = "IDEMKEY_TEST_AMQP_URL";
/// The RabbitMQ server used when [`AMQP_URL_ENV`] is not set and one answers here.
pub const AMQP_DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// RabbitMQ's own start script, which Debian's `rabbitmq-server` runs as the `rabbitmq` user.
pub const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// The variable naming a Valkey 8+ server program for the Valkey tests.
pub const VALKEY_ENV: &str = "IDEMKEY_TEST_VALKEY_SERVER";

/// Something a test needs, named in `#[idemkey_test_support::test(needs = [...])]` in snake
/// case (`pg_server` for [`Need::PgServer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A PostgreSQL server: [`PG_URL_ENV`], else one answering at 127.0.0.1:5432.
    Postgres,
    /// A standalone Redis server: [`REDIS_URL_ENV`], else one answering at 127.0.0.1:6379.
    Redis,
    /// A MySQL or MariaDB server: [`MYSQL_URL_ENV`], else one answering at 127.0.0.1:3306.
    Mysql,
    /// A Valkey server program: [`VALKEY_ENV`], else `valkey-server` on the `PATH`.
    Valkey,
    /// Mounting a tmpfs (root).
    Tmpfs,
    /// `chattr +i` on a file of the temporary directory (root and ext4).
    Chattr,
    /// PostgreSQL's server binaries, run as the `postgres` user (root).
    PgServer,
    /// MariaDB's server binaries, `mariadbd` and `mariadb-install-db` ([`mariadb_program`]).
    MariadbServer,
    /// libfaketime ([`faketime_library`]), which steps a process's wall clock.
    Faketime,
    /// Mounting a FUSE filesystem: `/dev/fuse` opened and mounted with mount(2) (root, no
    /// libfuse or `fusermount3` needed), as `idemkey-powerloss` does.
    Fuse,
    /// `redis-server` and `redis-cli` on the `PATH`, for a test that starts a server of its
    /// own ([`crate::process::redis::RedisServer`]).
    RedisServer,
    /// `python3` on the `PATH`: the proxy tests' upstream, and scripts of some tests.
    Python3,
    /// A NATS server with JetStream: [`NATS_URL_ENV`], else one answering at 127.0.0.1:4222.
    Nats,
    /// `nats-server` on the `PATH`, for a test that starts and restarts a broker of its own.
    NatsServer,
    /// A RabbitMQ server: [`AMQP_URL_ENV`], else one answering at 127.0.0.1:5672.
    Rabbitmq,
    /// RabbitMQ's server ([`RABBITMQ_SERVER`]), and root to run it as the `rabbitmq` user, for
    /// a test that starts and kills a RabbitMQ node of its own
    /// ([`crate::process::rabbitmq_node::RabbitNode`]).
    RabbitmqServer,
}

impl Need {
    /// Why this need is missing here, or `None` when it is met. Probed once per process; a
    /// variable naming a server is trusted without a probe, as the user asked for it.
    pub fn missing(self) -> Option<&'static str> {
        static MET: [OnceLock<bool>; 16] = [const { OnceLock::new() }; 16];
        let met = *MET[self as usize].get_or_init(|| self.probe());
        (!met).then(|| self.reason())
    }

    /// Fails the test, with what is missing and how to provide it, unless this need is met.
    pub fn require(self) {
        if let Some(reason) = self.missing() {
            panic!("{reason}");
        }
    }

    fn probe(self) -> bool {
        match self {
            Self::Postgres => env_or(PG_URL_ENV, || answers(5432)),
            Self::Redis => env_or(REDIS_URL_ENV, || answers(6379)),
            Self::Mysql => env_or(MYSQL_URL_ENV, || answers(3306)),
            Self::Valkey => env_or(VALKEY_ENV, || succeeds(&mut valkey_version())),
            Self::Tmpfs => can_mount_tmpfs(),
            Self::Chattr => can_make_immutable(),
            Self::PgServer => pg_server_bin().is_some_and(|bin| {
                let initdb = bin.join("initdb");
                succeeds(
                    Command::new("runuser")
                        .args(["-u", "postgres", "--"])
                        .arg(initdb)
                        .arg("--version"),
                )
            }),
            Self::MariadbServer => {
                mariadb_program("mariadb-install-db").is_some()
                    && mariadb_program("mariadbd")
                        .is_some_and(|server| succeeds(Command::new(server).arg("--version")))
            }
            Self::Faketime => faketime_library().is_some(),
            Self::Fuse => can_mount_fuse(),
            Self::RedisServer => {
                succeeds(Command::new("redis-server").arg("--version"))
                    && succeeds(Command::new("redis-cli").arg("--version"))
            }
            Self::Python3 => succeeds(Command::new("python3").arg("--version")),
            Self::Nats => env_or(NATS_URL_ENV, || answers(4222)),
            Self::NatsServer => succeeds(Command::new("nats-server").arg("--version")),
            Self::Rabbitmq => env_or(AMQP_URL_ENV, || answers(5672)),
            Self::RabbitmqServer => {
                std::path::Path::new(RABBITMQ_SERVER).exists()
                    && succeeds(Command::new("setpriv").args([
                        "--reuid=rabbitmq",
                        "--regid=rabbitmq",
                        "--init-groups",
                        "true",
                    ]))
            }
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Self::Postgres => {
                "no PostgreSQL at 127.0.0.1:5432; set IDEMKEY_TEST_PG_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL tests"
            }
            Self::Redis => {
                "no Redis at 127.0.0.1:6379; set IDEMKEY_TEST_REDIS_URL=redis://HOST:PORT to run the Redis tests"
            }
            Self::Mysql => {
                "no MySQL or MariaDB at 127.0.0.1:3306; set IDEMKEY_TEST_MYSQL_URL=mysql://USER@HOST:PORT/DB to run the MySQL tests"
            }
            Self::Valkey => {
                "no valkey-server on the PATH; set IDEMKEY_TEST_VALKEY_SERVER=/path/to/valkey-server to run the Valkey tests"
            }
            Self::Tmpfs => "cannot mount a tmpfs (needs root)",
            Self::Chattr => {
                "chattr +i fails in the temporary directory (needs root and a filesystem with the immutable flag, such as ext4)"
            }
            Self::PgServer => {
                "no PostgreSQL server binaries under /usr/lib/postgresql, or no `postgres` user to run them as (needs root)"
            }
            Self::MariadbServer => {
                "no MariaDB server binaries (mariadbd and mariadb-install-db on the PATH or in /usr/sbin); install mariadb-server"
            }
            Self::Faketime => {
                "no libfaketime.so.1 under /usr/lib/*/faketime or /usr/local/lib/faketime; install faketime"
            }
            Self::Fuse => {
                "cannot mount a FUSE filesystem: needs /dev/fuse (modprobe fuse; in a container, pass the device) and root (CAP_SYS_ADMIN) to call mount(2)"
            }
            Self::RedisServer => {
                "no redis-server or redis-cli on the PATH; install redis-server to run the tests that start Redis servers of their own"
            }
            Self::Python3 => "no python3 on the PATH; install python3",
            Self::Nats => {
                "no NATS at 127.0.0.1:4222; start nats-server -js, or set IDEMKEY_TEST_NATS_URL=nats://HOST:PORT, to run the NATS tests"
            }
            Self::NatsServer => {
                "no nats-server on the PATH; install nats-server to run the tests that start brokers of their own"
            }
            Self::Rabbitmq => {
                "no RabbitMQ at 127.0.0.1:5672; start rabbitmq-server, or set IDEMKEY_TEST_AMQP_URL=amqp://USER:PASS@HOST:PORT/%2f, to run the RabbitMQ tests"
            }
            Self::RabbitmqServer => {
                "no /usr/lib/rabbitmq/bin/rabbitmq-server, or no `rabbitmq` user to run it as with setpriv (needs root); install rabbitmq-server to run the tests that start RabbitMQ nodes of their own"
            }
        }
    }
}

/// The PostgreSQL server's URL: [`PG_URL_ENV`], else [`PG_DEFAULT_URL`] if a server answers.
/// Neither: the test fails, saying so.
pub fn postgres_url() -> String {
    std::env::var(PG_URL_ENV).unwrap_or_else(|_| {
        Need::Postgres.require();
        PG_DEFAULT_URL.to_owned()
    })
}

/// The NATS server's URL: [`NATS_URL_ENV`], else [`NATS_DEFAULT_URL`] if a server answers.
/// Neither: the test fails, saying so.
pub fn nats_url() -> String {
    std::env::var(NATS_URL_ENV).unwrap_or_else(|_| {
        Need::Nats.require();
        NATS_DEFAULT_URL.to_owned()
    })
}

/// The RabbitMQ server's URL: [`AMQP_URL_ENV`], else [`AMQP_DEFAULT_URL`] if a server
/// answers. Neither: the test fails, saying so.
pub fn amqp_url() -> String {
    std::env::var(AMQP_URL_ENV).unwrap_or_else(|_| {
        Need::Rabbitmq.require();
        AMQP_DEFAULT_URL.to_owned()
    })
}

/// The standalone Redis server's URL: [`REDIS_URL_ENV`], else [`REDIS_DEFAULT_URL`] if a
/// server answers. Neither: the test fails, saying so.
pub fn redis_url() -> String {
    std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| {
        Need::Redis.require();
        REDIS_DEFAULT_URL.to_owned()
    })
}

/// The MySQL or MariaDB server's URL: [`MYSQL_URL_ENV`], else [`MYSQL_DEFAULT_URL`] if a
/// server answers. Neither: the test fails, saying so.
pub fn mysql_url() -> String {
    std::env::var(MYSQL_URL_ENV).unwrap_or_else(|_| {
        Need::Mysql.require();
        MYSQL_DEFAULT_URL.to_owned()
    })
}

/// The Valkey server program: [`VALKEY_ENV`], else `valkey-server` if it is on the `PATH`.
/// Neither: the test fails, saying so.
pub fn valkey_program() -> String {
    std::env::var(VALKEY_ENV).unwrap_or_else(|_| {
        Need::Valkey.require();
        "valkey-server".to_owned()
    })
}

/// The newest PostgreSQL server binaries' directory under `/usr/lib/postgresql`, if any.
pub fn pg_server_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found.pop()
}

/// A MariaDB server program (`mariadbd`, `mariadb-install-db`): on the `PATH`, else in
/// `/usr/sbin` or `/usr/local/sbin`, where packages put `mariadbd` out of a user's `PATH`.
pub fn mariadb_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|program| program.is_file())
}

/// libfaketime, which a process started with it in `LD_PRELOAD` takes its clocks from: where
/// the `faketime` package puts it, else a local build's.
pub fn faketime_library() -> Option<PathBuf> {
    let multiarch = std::fs::read_dir("/usr/lib").ok()?.filter_map(|entry| {
        let dir = entry.ok()?.path().join("faketime");
        Some(dir)
    });
    multiarch
        .chain([PathBuf::from("/usr/local/lib/faketime")])
        .map(|dir| dir.join("libfaketime.so.1"))
        .find(|library| library.is_file())
}

fn env_or(env: &str, probe: impl FnOnce() -> bool) -> bool {
    std::env::var_os(env).is_some() || probe()
}

/// Whether something accepts a TCP connection on this port of 127.0.0.1 within a moment.
fn answers(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

fn valkey_version() -> Command {
    let mut command = Command::new("valkey-server");
    command.arg("--version");
    command
}

/// Whether `command` runs and exits 0, its output discarded.
fn succeeds(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn can_mount_tmpfs() -> bool {
    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(dir.path())
        .output()
        .is_ok_and(|out| out.status.success());
    // Unmounted before the directory is removed, so the probe leaves nothing behind.
    mount && succeeds(Command::new("umount").arg(dir.path()))
}

fn can_make_immutable() -> bool {
    let Ok(file) = tempfile::NamedTempFile::new() else {
        return false;
    };
    let set = succeeds(Command::new("chattr").arg("+i").arg(file.path()));
    // Cleared whatever happened, or the file could not be deleted.
    let cleared = succeeds(Command::new("chattr").arg("-i").arg(file.path()));
    set && cleared
}

/// Whether this process can mount a FUSE filesystem itself: open `/dev/fuse` and mount(2) it
/// on a temporary directory. No daemon answers the mount; closing the device first aborts
/// the connection, so the lazy unmount after it cannot wait on one.
fn can_mount_fuse() -> bool {
    use std::os::fd::AsRawFd;

    use nix::mount::{MntFlags, MsFlags};

    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    let Ok(device) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    else {
        return false;
    };
    let options = format!(
        "fd={},rootmode=40000,user_id={},group_id={}",
        device.as_raw_fd(),
        nix::unistd::getuid(),
        nix::unistd::getgid()
    );
    let mounted = nix::mount::mount(
        Some("idemkey-fuse-probe"),
        dir.path(),
        Some("fuse"),
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
        Some(options.as_str()),
    )
    .is_ok();
    drop(device);
    // Unmounted before the directory is removed, so the probe leaves nothing behind.
    mounted && nix::mount::umount2(dir.path(), MntFlags::MNT_DETACH).is_ok()
}
