//! Renewing a claim's lease while its handler runs (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{Claim, Error, Store};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::local::LeaseMark;
use crate::observe::timed;

/// A background task that extends the lease every interval until stopped.
pub(crate) struct Heartbeat {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Claim>,
    granted: Claim,
}

impl Heartbeat {
    /// Starts renewing `claim` every `every`, and `mark` with it; with `None` it only holds
    /// the claim.
    pub(crate) fn start<St: Store>(
        store: St,
        claim: Claim,
        every: Option<Duration>,
        mark: Arc<LeaseMark>,
    ) -> Self {
        let (stop, stopped) = oneshot::channel();
        let granted = claim.clone();
        let task = tokio::spawn(beat(store, (claim, mark), every, stopped).in_current_span());
        Self {
            stop,
            task,
            granted,
        }
    }

    /// Stops renewing at once; the future returns the claim as last extended, once a
    /// renewal under way has ended.
    pub(crate) fn stop(self) -> impl Future<Output = Claim> + Send {
        // The task may have ended already (lease lost); then nobody listens, which is fine.
        let _ = self.stop.send(());
        let Self { task, granted, .. } = self;
        async move { task.await.unwrap_or(granted) }
    }
}

async fn beat<St: Store>(
    store: St,
    (mut claim, mark): (Claim, Arc<LeaseMark>),
    every: Option<Duration>,
    mut stopped: oneshot::Receiver<()>,
) -> Claim {
    let Some(every) = every else {
        return claim;
    };
    loop {
        tokio::select! {
            // Stopping wins a tie with the tick: a handler that has answered renews nothing,
            // and the order does not depend on tokio's random branch choice.
            biased;
            _ = &mut stopped => return claim,
            () = tokio::time::sleep(every) => {}
        }
        let sent = Instant::now();
        match timed("extend", store.extend(&mut claim)).await {
            Ok(()) => mark.renewed(sent),
            // A renewal that waited for the writer while the handler's transaction completed
            // the record: stopped, not lost.
            Err(Error::Fenced) if stopped.try_recv().is_ok() => return claim,
            Err(Error::Fenced) => {
                tracing::error!(
                    "lease lost: another executor took over this record; \
                     this execution's response will not be stored"
                );
                return claim;
            }
            Err(err) => tracing::warn!(error = %err, "could not extend the lease; will retry"),
        }
    }
}
