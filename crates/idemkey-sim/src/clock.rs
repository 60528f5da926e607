//! The virtual clock: tokio's paused time, read by the store as its own clock.

use std::cell::Cell;
use std::future::Future;

use idemkey_core::Clock;
use tokio::time::Instant;

/// Where virtual time starts, in ms since the Unix epoch: any fixed value does.
const EPOCH_MS: u64 = 1_700_000_000_000;

thread_local! {
    /// The skew of the caller being served right now: only the planted "lease clock from the
    /// application" bug sets it. The simulation runs on one thread, and a store call reads
    /// its clock within the one poll that [`skewed`] wraps.
    static SKEW_MS: Cell<i64> = const { Cell::new(0) };
}

/// Virtual time since the start of a run, in ms, as the [`Clock`] of the store.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SimClock {
    start: Instant,
}

impl SimClock {
    /// A clock starting now; call it inside the paused runtime.
    pub(crate) fn start() -> Self {
        Self {
            start: Instant::now(),
        }
    }

    /// Virtual ms since the start of the run: the time stamps of the history.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The true store time: what the store's clock reads when nobody skews it.
    pub(crate) fn true_ms(&self) -> u64 {
        EPOCH_MS + self.elapsed_ms()
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.true_ms()
            .saturating_add_signed(SKEW_MS.with(Cell::get))
    }
}

/// Runs `future` with the clock skewed by `skew_ms` during each of its polls.
pub(crate) async fn skewed<F: Future>(skew_ms: i64, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let before = SKEW_MS.replace(skew_ms);
        let polled = future.as_mut().poll(cx);
        SKEW_MS.set(before);
        polled
    })
    .await
}
