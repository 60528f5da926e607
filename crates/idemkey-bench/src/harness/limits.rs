//! Bounds on what a measured service can make the bench wait for or hold in memory.
//!
//! With `--url` the bench measures a service it cannot trust. Before these bounds, a server
//! that streamed an endless body grew the bench to gigabytes and the run never ended; one that
//! sent headers and then nothing hung it for good.

use std::time::Duration;

const MIB: usize = 1024 * 1024;

/// Largest response body the bench reads, in bytes: 1 MiB, for every request but the
/// storm's listing.
///
/// The notes service answers the bench with one note or one problem document, a few hundred
/// bytes, so a thousand times that is never a real answer. A larger (or endless) body fails
/// its request, which counts as an error in the tables (or fails the workload's setup), and
/// the bench has buffered at most this much of it.
pub(crate) const MAX_BODY: usize = MIB;

/// Longest a request may take, from (re)connecting to the last byte of the body: 10 s.
///
/// A healthy service answers in milliseconds even at the bench's concurrency; ten seconds is a
/// service that stopped answering. A request that takes longer fails as an error, so a server
/// that stalls its headers or its body cannot hang the bench: a round of a workload outlasts
/// its share of the budget by at most this (its workers check the deadline before each
/// request), and every setup request ends within it.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest body of the storm's `GET /v1/notes`, in bytes: 64 MiB.
///
/// Unlike every other answer, the list holds every note of the bench's actor: the whole run's
/// creates (at about 125 bytes a note, a 10 s create pair at a few thousand requests a second
/// lists a few MiB) and, against a long-lived `--url` service, earlier runs' too. 64 MiB is
/// about half a million notes. The list is counted as it is parsed, without a tree of it
/// ([`super::listing`]), so the bench holds at most about twice this; a longer list fails the
/// run with this limit named.
pub(crate) const MAX_LIST_BODY: usize = 64 * MIB;

/// Longest the storm's `GET /v1/notes` may take: 60 s, since its body may be
/// [`MAX_LIST_BODY`] (64 MiB in 60 s is under 10 Mbit/s).
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one request may take and how large its body may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The whole exchange: connecting if needed, the head, the body.
    pub(crate) time: Duration,
    /// The response body, in bytes.
    pub(crate) body: usize,
}

impl Limits {
    /// Every request but the storm's listing.
    pub(crate) const REQUEST: Self = Self {
        time: REQUEST_TIMEOUT,
        body: MAX_BODY,
    };

    /// The storm's `GET /v1/notes`.
    pub(crate) const LISTING: Self = Self {
        time: LIST_TIMEOUT,
        body: MAX_LIST_BODY,
    };

    /// The error of a body past `self.body`, naming the limit.
    pub(crate) fn body_too_large(self) -> anyhow::Error {
        anyhow::anyhow!(
            "the response body exceeds the bench's {} limit",
            size(self.body)
        )
    }

    /// The error of an exchange that outlasted `self.time`, naming the limit.
    pub(crate) fn timed_out(self) -> anyhow::Error {
        anyhow::anyhow!(
            "no complete response within the bench's {} s limit",
            self.time.as_secs_f64()
        )
    }
}

/// `n` bytes in MiB when whole, in bytes otherwise.
fn size(n: usize) -> String {
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_limits() {
        let request = Limits::REQUEST.body_too_large().to_string();
        assert!(request.ends_with("bench's 1 MiB limit"), "{request}");
        let listing = Limits::LISTING.body_too_large().to_string();
        assert!(listing.ends_with("bench's 64 MiB limit"), "{listing}");
        let timeout = Limits::REQUEST.timed_out().to_string();
        assert!(timeout.ends_with("bench's 10 s limit"), "{timeout}");
        assert_eq!(size(100), "100 bytes");
    }
}
