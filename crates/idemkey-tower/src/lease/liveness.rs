//! This process's heartbeat as the owner of its claims (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)), with
//! [`Config::owner_grace`](crate::Config::owner_grace): one write per interval for the whole
//! process, however many claims it holds. Every claim names the owner, so once the process
//! dies (or stalls past the grace) its claims are stale to every other process and may be
//! taken over, fenced as after an expired lease, without waiting for their leases.
//!
//! The heartbeat starts with the first keyed request (in a task of its own) or the first
//! claim, which waits for the first beat (a claim naming an owner the store has not heard of
//! would live by its lease alone), and stops with the
//! layer: the task holds the mark only weakly. A process whose beats fail stops
//! trusting its claims a tenth of the grace before the others may take them over, by its own
//! clock: its duplicates then go to the store, and it makes no new claim until a beat
//! succeeds again (503 `store-unavailable`), since a claim naming a lapsed owner would be
//! stale as soon as it is made.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use idemkey_core::{Error, OwnerId, Store};
use tokio::sync::OnceCell;
// tokio's clock, as the local lease marks.
use tokio::time::Instant;
use tracing::Instrument;

use crate::observe::timed;

/// A process's identity as the owner of its claims, and its heartbeat (behaviour
/// [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): set it with
/// [`Config::owner_grace`](crate::Config::owner_grace). Clones share the owner and its one
/// heartbeat, which starts with the first claim of any layer holding it and stops when the
/// last clone is dropped. Share it only between layers over one store: it beats in the store
/// of the layer that claimed first.
#[derive(Clone, Debug)]
pub struct OwnerHeartbeat(Arc<Liveness>);

impl OwnerHeartbeat {
    /// A new owner (a random id: a restarted process is another owner) whose claims are stale
    /// `grace` after its last heartbeat.
    pub fn new(grace: Duration) -> Self {
        Self(Arc::new(Liveness::new(grace)))
    }

    /// The grace after the last heartbeat.
    pub fn grace(&self) -> Duration {
        self.0.grace
    }

    pub(crate) fn liveness(&self) -> &Liveness {
        &self.0
    }

    /// Starts the heartbeat in a task of its own unless it runs: at the first keyed request,
    /// not only at the first claim. An owner is judged lapsed only while beats come (the run
    /// of beats must be unbroken now), so a process that only looks records up, and never
    /// claims, must beat too for others' dead claims to be taken over.
    /// One attempt at a time: while one is on its way (a store that is down may take a grace
    /// to refuse it), later requests start none of their own.
    pub(crate) fn start_soon<St: Store>(&self, store: &St) {
        let liveness = &self.0;
        if liveness.started.initialized() || liveness.starting.swap(true, Ordering::SeqCst) {
            return;
        }
        let (heartbeat, store) = (self.clone(), store.clone());
        tokio::spawn(async move {
            if let Err(err) = heartbeat.0.owner(&store).await {
                tracing::warn!(error = %err, "could not start the owner heartbeat; will retry");
            }
            heartbeat.0.starting.store(false, Ordering::SeqCst);
        });
    }
}

/// This process's owner identity and its heartbeat, started at the first claim.
#[derive(Debug)]
pub(crate) struct Liveness {
    owner: OwnerId,
    grace: Duration,
    started: OnceCell<Arc<OwnerMark>>,
    /// Whether a [`OwnerHeartbeat::start_soon`] attempt is on its way.
    starting: AtomicBool,
}

/// Until when this process trusts its own heartbeat, by its own clock.
#[derive(Debug)]
pub(crate) struct OwnerMark {
    until: Mutex<Instant>,
    grace: Duration,
}

impl OwnerMark {
    fn until(&self) -> MutexGuard<'_, Instant> {
        self.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A beat sent at `sent` succeeded: the store counts the owner alive until after
    /// `sent + grace`; trusted until a tenth of the grace before that. Beats may return out
    /// of order, so an earlier one never shortens what a later one gave.
    fn beaten(&self, sent: Instant) {
        let until = sent + self.grace.saturating_sub(self.grace / 10);
        let mut trusted = self.until();
        *trusted = (*trusted).max(until);
    }

    /// Whether the claims naming this owner are still this process's.
    pub(crate) fn live(&self) -> bool {
        Instant::now() < *self.until()
    }
}

impl Liveness {
    /// A new owner (a random id: a restarted process is another owner) whose claims are
    /// stale `grace` after its last beat.
    pub(crate) fn new(grace: Duration) -> Self {
        Self {
            owner: OwnerId::new(),
            grace,
            started: OnceCell::new(),
            starting: AtomicBool::new(false),
        }
    }

    /// How often the heartbeat is written: four times a grace, so that one slow or failed
    /// write costs nothing.
    fn every(&self) -> Duration {
        (self.grace / 4).max(Duration::from_millis(1))
    }

    /// The owner a claim names, and the mark its execution trusts: the heartbeat is started
    /// by the first call (after its first beat). [`Error::Unavailable`] while the heartbeat
    /// has lapsed by this process's clock.
    pub(crate) async fn owner<St: Store>(
        &self,
        store: &St,
    ) -> Result<(OwnerId, Arc<OwnerMark>), Error> {
        let mark = self
            .started
            .get_or_try_init(|| self.start(store.clone()))
            .await?;
        if !mark.live() {
            return Err(Error::Unavailable(
                "this process's owner heartbeat has lapsed: its claims may be taken over".into(),
            ));
        }
        Ok((self.owner, mark.clone()))
    }

    async fn start<St: Store>(&self, store: St) -> Result<Arc<OwnerMark>, Error> {
        let sent = Instant::now();
        one_beat(&store, self.owner, self.grace).await?;
        let mark = Arc::new(OwnerMark {
            until: Mutex::new(sent),
            grace: self.grace,
        });
        mark.beaten(sent);
        let (owner, grace, every) = (self.owner, self.grace, self.every());
        let beating = beat(store, (owner, grace, every), Arc::downgrade(&mark));
        // A span of its own: the heartbeat outlives the request whose claim started it.
        let span = tracing::info_span!(parent: None, "owner_heartbeat", ?owner);
        tokio::spawn(beating.instrument(span));
        Ok(mark)
    }
}

/// How many beats may be on their way at once. A store that hangs would otherwise gather a
/// task per interval; four intervals are a grace, after which the claims are lost anyway.
const BEATS_IN_FLIGHT: usize = 4;

/// Writes the heartbeat every `every` until the layer (which holds the mark) is gone.
///
/// On a fixed schedule, each beat in a task of its own: a slow beat (a store under load, a
/// write queued behind an fsync) must not push the next one back, or a few slow writes in a
/// row would let the grace lapse while the store is merely slow.
async fn beat<St: Store>(
    store: St,
    (owner, grace, every): (OwnerId, Duration, Duration),
    mark: Weak<OwnerMark>,
) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(BEATS_IN_FLIGHT));
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        if mark.strong_count() == 0 {
            return;
        }
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            tracing::warn!("owner heartbeats are still on their way; skipping one");
            continue;
        };
        let (store, mark) = (store.clone(), mark.clone());
        let one = async move {
            let sent = Instant::now();
            let done = one_beat(&store, owner, grace).await;
            drop(permit);
            if let Some(mark) = mark.upgrade() {
                beaten(&mark, sent, done);
            }
        };
        tokio::spawn(one.in_current_span());
    }
}

/// One beat, given up after a grace: by then it can no longer keep the claims alive, and a
/// beat stuck on a half-open connection (no statement timeout, TCP retrying for minutes)
/// would otherwise hold one of the [`BEATS_IN_FLIGHT`] places until the heartbeat stops.
async fn one_beat<St: Store>(store: &St, owner: OwnerId, grace: Duration) -> Result<(), Error> {
    match tokio::time::timeout(grace, timed("beat", store.beat(owner, grace))).await {
        Ok(done) => done,
        Err(_) => Err(Error::Unavailable(
            format!("the owner heartbeat got no answer within the grace ({grace:?})").into(),
        )),
    }
}

/// Records one beat's outcome in the mark.
fn beaten(mark: &OwnerMark, sent: Instant, done: Result<(), Error>) {
    match done {
        Ok(()) => mark.beaten(sent),
        Err(err) if mark.live() => {
            tracing::warn!(error = %err, "could not write the owner heartbeat; will retry");
        }
        Err(err) => tracing::error!(
            error = %err,
            "the owner heartbeat has lapsed: this process's claims may be taken over, \
             and their responses will not be stored if they are"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::{Claim, ClaimRequest, MemoryStore, Record, Scope, StoredResponse, TryClaim};

    #[tokio::test(start_paused = true)]
    async fn the_heartbeat_keeps_the_owner_alive_until_the_layer_is_gone() {
        let store = MemoryStore::new();
        let liveness = Liveness::new(Duration::from_secs(2));
        let (owner, mark) = liveness.owner(&store).await.unwrap();
        assert_eq!(owner, liveness.owner);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(mark.live(), "renewed by the task");
        let weak = Arc::downgrade(&mark);
        drop((mark, liveness));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            weak.upgrade().is_none(),
            "the task holds the mark only weakly"
        );
    }

    /// A store whose heartbeats from the `hang_from`-th on (counted from 0) never return, or
    /// only the second with `hang_from: usize::MAX`, as a write stuck behind a slow disk.
    #[derive(Clone)]
    struct SlowBeat {
        inner: MemoryStore,
        beats: Arc<std::sync::atomic::AtomicUsize>,
        hang_from: usize,
    }

    impl Store for SlowBeat {
        async fn lookup(&self, scope: &Scope) -> Result<Option<Record>, Error> {
            self.inner.lookup(scope).await
        }
        async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim, Error> {
            self.inner.try_claim(request).await
        }
        async fn reclaim(&self, r: &ClaimRequest, seen: &Record) -> Result<Option<Claim>, Error> {
            self.inner.reclaim(r, seen).await
        }
        async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), Error> {
            self.inner.complete(claim, response).await
        }
        async fn release(&self, claim: &Claim) -> Result<(), Error> {
            self.inner.release(claim).await
        }
        async fn discard(&self, claim: &Claim) -> Result<(), Error> {
            self.inner.discard(claim).await
        }
        async fn flush_claim(&self, claim: &Claim) -> Result<(), Error> {
            self.inner.flush_claim(claim).await
        }
        async fn extend(&self, claim: &mut Claim) -> Result<(), Error> {
            self.inner.extend(claim).await
        }
        async fn forget(&self, scope: &Scope) -> Result<bool, Error> {
            self.inner.forget(scope).await
        }
        async fn sweep(&self, batch: u32) -> Result<u64, Error> {
            self.inner.sweep(batch).await
        }
        async fn secret(&self) -> Result<Arc<[u8]>, Error> {
            self.inner.secret().await
        }
        async fn beat(&self, owner: OwnerId, grace: Duration) -> Result<(), Error> {
            let n = self.beats.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if n == 1 || n >= self.hang_from {
                std::future::pending::<()>().await;
            }
            self.inner.beat(owner, grace).await
        }
    }

    /// Every beat after the first hangs, as on a half-open connection.
    #[tokio::test(start_paused = true)]
    async fn beats_that_hang_are_given_up_so_the_heartbeat_goes_on() {
        let store = SlowBeat {
            inner: MemoryStore::new(),
            beats: Arc::default(),
            hang_from: 1,
        };
        let liveness = Liveness::new(Duration::from_secs(2));
        let (_, mark) = liveness.owner(&store).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Without a timeout, four hung beats would fill every place and the rest be skipped.
        let sent = store.beats.load(std::sync::atomic::Ordering::SeqCst);
        assert!(sent > 1 + BEATS_IN_FLIGHT + 4, "beats went on: {sent}");
        assert!(!mark.live(), "no beat was answered: the owner lapsed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_beat_that_hangs_does_not_hold_back_the_next() {
        let store = SlowBeat {
            inner: MemoryStore::new(),
            beats: Arc::default(),
            hang_from: usize::MAX,
        };
        let liveness = Liveness::new(Duration::from_secs(2));
        let (_, mark) = liveness.owner(&store).await.unwrap();
        // The second beat (at 0.5 s) never returns; a third, on schedule, renews.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            store.beats.load(std::sync::atomic::Ordering::SeqCst) > 3,
            "beats went on"
        );
        assert!(mark.live(), "renewed by the beats after the stuck one");
    }
}
