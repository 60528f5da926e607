//! CPU time spent while a side runs: the server's (when the bench started it) and the whole
//! machine's, from Linux's `/proc`. On two shared cores a saturated side's throughput is
//! the cores over its CPU per request, so these show where a ratio's difference goes:
//! the service's own work, or everything (client, server and database) together.
//!
//! Elsewhere than Linux, or if `/proc` cannot be read, nothing is reported.

use std::ops::AddAssign;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The clock ticks of `/proc`'s CPU times: `USER_HZ`, which Linux fixes at 100 for every
/// user-space interface whatever the kernel's own tick rate.
const TICKS_PER_SECOND: u64 = 100;

/// The process id of the server the bench started (0: none). One server runs at a time.
static SERVER: AtomicU32 = AtomicU32::new(0);

/// Makes `pid` the server whose CPU time is measured (`None`: none).
pub(crate) fn watch_server(pid: Option<u32>) {
    SERVER.store(pid.unwrap_or(0), Ordering::Relaxed);
}

/// CPU times, in ticks, at one moment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    server: Option<u64>,
    machine: Option<u64>,
}

/// CPU time spent between two marks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Spent {
    /// By the server process, all its threads.
    pub(crate) server: Option<Duration>,
    /// By the machine, every core, every process (not idle, not waiting for I/O).
    pub(crate) machine: Option<Duration>,
}

impl Mark {
    /// Now.
    pub(crate) fn now() -> Self {
        let pid = SERVER.load(Ordering::Relaxed);
        Self {
            server: (pid != 0).then(|| process_ticks(pid)).flatten(),
            machine: machine_ticks(),
        }
    }

    /// What was spent since this mark.
    pub(crate) fn spent(self) -> Spent {
        let now = Self::now();
        let between = |then: Option<u64>, now: Option<u64>| Some(ticks(now?.checked_sub(then?)?));
        Spent {
            server: between(self.server, now.server),
            machine: between(self.machine, now.machine),
        }
    }
}

impl AddAssign for Spent {
    fn add_assign(&mut self, other: Self) {
        let add = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, None) => a,
            (None, b) => b,
        };
        self.server = add(self.server, other.server);
        self.machine = add(self.machine, other.machine);
    }
}

/// This process's CPU time, every thread: the bench's own, the client side of a workload.
pub(crate) fn this_process() -> Option<Duration> {
    process_ticks(std::process::id()).map(ticks)
}

fn ticks(n: u64) -> Duration {
    Duration::from_micros(n * (1_000_000 / TICKS_PER_SECOND))
}

/// Another process's CPU time, every thread (the database server's, when it runs here).
pub(crate) fn process(pid: u32) -> Option<Duration> {
    process_ticks(pid).map(ticks)
}

/// The CPU time of thread `tid` of this process (the proxy workloads' upstream, which runs
/// on a thread of its own here).
pub(crate) fn thread(tid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    parse_process(&stat).map(ticks)
}

/// The threads of this process whose name starts with `prefix` (the proxy workloads'
/// upstream's SQLite connections, which run on threads sqlx starts and names as asked).
pub(crate) fn threads_named(prefix: &str) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.starts_with(prefix))
        })
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .collect()
}

/// The id of the calling thread, as `/proc` names it (`None` elsewhere than Linux).
pub(crate) fn current_thread() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// A process's user and system time (`/proc/PID/stat` fields 14 and 15).
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_process(&stat)
}

fn parse_process(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The machine's busy time: the first line of `/proc/stat` less its idle and I/O wait.
fn machine_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine(&stat)
}

fn parse_machine(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal (guest time is counted in user).
    let busy = fields.iter().take(8).sum::<u64>();
    Some(busy - fields.get(3)? - fields.get(4)?)
}

/// The 1, 5 and 15 minute load averages, to tell whether other work shared the machine.
pub(crate) fn loadavg() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_times_are_counted_past_a_name_with_parentheses() {
        let stat = "42 (idem (key) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 5 0";
        assert_eq!(parse_process(stat), Some(325));
        assert_eq!(parse_process("42 (x) S 1"), None);
    }

    #[test]
    fn machine_time_leaves_out_idle_and_io_wait() {
        let stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_machine(stat), Some(161));
        assert_eq!(parse_machine("intr 1 2"), None);
    }

    #[test]
    fn spent_times_add_up_where_known() {
        let mut a = Spent {
            server: Some(Duration::from_millis(10)),
            machine: None,
        };
        a += Spent {
            server: Some(Duration::from_millis(5)),
            machine: Some(Duration::from_millis(7)),
        };
        assert_eq!(a.server, Some(Duration::from_millis(15)));
        assert_eq!(a.machine, Some(Duration::from_millis(7)));
    }
}
