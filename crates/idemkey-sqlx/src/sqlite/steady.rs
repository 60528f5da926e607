//! The clock SQLite's owners' heartbeats are judged by: the host's steady clock.
//!
//! A SQLite file is shared only by processes on one host, and its "database clock" is each
//! process's own wall clock, which an NTP step, a VM resumed with an old clock or an operator
//! can move by any amount, in one process's view and not another's (`faketime`). Judged by
//! it, a forward step larger than the grace makes every other owner look lapsed and their
//! live claims taken over. The steady clock (`CLOCK_MONOTONIC`) is one for the whole host
//! and never steps, so the heartbeats' marks, and the run of beats without a gap, are kept in
//! it: only a lease or a retention, which must outlive a restart of the host, is wall time.
//!
//! After the host restarts, its steady clock starts again near zero: the run of beats
//! starts again with the first beat that goes back by more than the grace, and an owner of
//! the previous boot (all dead) is lapsed once this boot's clock passes its mark, or its
//! claims' leases end first. Processes in different time namespaces do not share one steady
//! clock: they must not share a file.

/// The host's steady clock in milliseconds (since boot on Linux).
#[cfg(unix)]
pub(super) fn now_ms() -> i64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    now.tv_sec * 1000 + now.tv_nsec / 1_000_000
}

/// Elsewhere the wall clock: no system-wide steady clock is read here.
#[cfg(not(unix))]
pub(super) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_steady_clock_never_goes_back() {
        let first = super::now_ms();
        let second = super::now_ms();
        assert!(first > 0 && second >= first);
    }
}
