//! Redis errors → idemkey's [`Error`]: what may pass is `Unavailable`, a reply lost after a
//! completion was sent is `OutcomeUnknown`, the rest (a script error, bad data) `Backend`.

use idemkey_core::Error;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// What a lost reply would leave unknown, per operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Reads, claims, releases…: whether or not the script ran, nothing was executed on its
    /// word, so a lost reply is only `Unavailable` (as for the SQL stores' lease claims; a
    /// claim that did land runs out with its lease).
    Harmless,
    /// A completion: once sent, a lost reply leaves unknown whether the response is stored.
    Commit,
}

/// Classifies a redis-rs error for an operation of kind `sent`.
pub(crate) fn store_error(error: RedisError, sent: Sent) -> Error {
    if refused_before_running(&error) {
        Error::Unavailable(Box::new(error))
    } else if lost_in_flight(&error) {
        match sent {
            Sent::Harmless => Error::Unavailable(Box::new(error)),
            Sent::Commit => Error::OutcomeUnknown(Box::new(error)),
        }
    } else {
        Error::Backend(Box::new(error))
    }
}

/// An operation whose bound ran out before any reply: like a lost reply.
pub(crate) fn timed_out(sent: Sent, bound: std::time::Duration) -> Error {
    let cause = format!("no reply from Redis within {bound:?}").into();
    match sent {
        Sent::Harmless => Error::Unavailable(cause),
        Sent::Commit => Error::OutcomeUnknown(cause),
    }
}

/// Nothing ran: no connection could be made, or the server refused the command before running
/// it for a reason that passes (loading, failover, cluster reconfiguring, out of memory, a
/// script busy, persistence failing).
fn refused_before_running(error: &RedisError) -> bool {
    if error.is_connection_refusal() || error.kind() == ErrorKind::ClusterConnectionNotFound {
        return true;
    }
    match error.kind() {
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
        ),
        ErrorKind::Extension => matches!(
            error.code(),
            Some("OOM" | "BUSY" | "MISCONF" | "NOREPLICAS" | "LOADING")
        ),
        _ => false,
    }
}

/// The connection failed with the command perhaps sent: dropped, reset, timed out.
fn lost_in_flight(error: &RedisError) -> bool {
    error.is_io_error() || error.is_timeout() || error.is_connection_dropped()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn io(kind: io::ErrorKind) -> RedisError {
        io::Error::from(kind).into()
    }

    #[test]
    fn a_refused_connection_is_unavailable_even_for_a_commit() {
        let refused = io(io::ErrorKind::ConnectionRefused);
        assert!(matches!(
            store_error(refused, Sent::Commit),
            Error::Unavailable(_)
        ));
    }

    #[test]
    fn a_lost_reply_is_unknown_only_for_a_commit() {
        for kind in [io::ErrorKind::ConnectionReset, io::ErrorKind::TimedOut] {
            assert!(matches!(
                store_error(io(kind), Sent::Commit),
                Error::OutcomeUnknown(_)
            ));
            assert!(matches!(
                store_error(io(kind), Sent::Harmless),
                Error::Unavailable(_)
            ));
        }
    }

    #[test]
    fn script_errors_are_backend_errors() {
        let script = redis::make_extension_error("IDEMKEY_SCOPE".into(), Some("collision".into()));
        assert!(matches!(
            store_error(script, Sent::Harmless),
            Error::Backend(_)
        ));
        let oom = redis::make_extension_error("OOM".into(), None);
        assert!(matches!(
            store_error(oom, Sent::Commit),
            Error::Unavailable(_)
        ));
    }
}
