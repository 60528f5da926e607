//! This process's heartbeat as the owner of its claims (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)), with
//! [`Config::owner_grace`](crate::Config::owner_grace): one write per interval for the whole
//! process, however many claims it holds. Every claim names the owner, so once the process
//! dies (or stalls past the grace) its claims are stale to every other process and may be
//! taken over, fenced as after an expired lease, without waiting for their leases.
//!
//! The heartbeat starts with the first claim, which waits for the first beat (a claim naming
//! an owner the store has not heard of would live by its lease alone), and stops with the
//! layer: the task holds the mark only weakly. A process whose beats fail stops
//! trusting its claims a tenth of the grace before the others may take them over, by its own
//! clock: its duplicates then go to the store, and it makes no new claim until a beat
//! succeeds again (503 `store-unavailable`), since a claim naming a lapsed owner would be
//! stale as soon as it is made.

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
}

/// This process's owner identity and its heartbeat, started at the first claim.
#[derive(Debug)]
pub(crate) struct Liveness {
    owner: OwnerId,
    grace: Duration,
    started: OnceCell<Arc<OwnerMark>>,
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
    /// `sent + grace`; trusted until a tenth of the grace before that.
    fn beaten(&self, sent: Instant) {
        *self.until() = sent + self.grace.saturating_sub(self.grace / 10);
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
        timed("beat", store.beat(self.owner, self.grace)).await?;
        let mark = Arc::new(OwnerMark {
            until: Mutex::new(sent),
            grace: self.grace,
        });
        mark.beaten(sent);
        let (owner, grace, every) = (self.owner, self.grace, self.every());
        let beating = beat(store, (owner, grace, every), Arc::downgrade(&mark));
        tokio::spawn(beating.in_current_span());
        Ok(mark)
    }
}

/// Writes the heartbeat every `every` until the layer (which holds the mark) is gone.
async fn beat<St: Store>(
    store: St,
    (owner, grace, every): (OwnerId, Duration, Duration),
    mark: Weak<OwnerMark>,
) {
    loop {
        tokio::time::sleep(every).await;
        let Some(mark) = mark.upgrade() else {
            return;
        };
        let sent = Instant::now();
        match timed("beat", store.beat(owner, grace)).await {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::MemoryStore;

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
}
