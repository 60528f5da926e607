//! [`Shared`]: what every request of a lease layer shares, which the service hands to each
//! step (begin, execute, settle).

use std::sync::Arc;

use super::liveness::OwnerHeartbeat;
use super::local::Local;
use crate::misconfig::Noticed;
use crate::tx::MaybeTransactions;
use crate::{Config, Executions};

/// What every request of a layer shares: its store and settings, the executions it runs in
/// tasks of their own, what this process is doing for it, and the transactions it offers.
#[derive(Clone, Debug)]
pub(crate) struct Shared<St> {
    pub(crate) store: St,
    pub(crate) config: Arc<Config>,
    pub(crate) executions: Executions,
    pub(crate) local: Arc<Local>,
    pub(crate) transactions: MaybeTransactions,
    /// This process's heartbeat as the owner of its claims, with an owner grace.
    pub(crate) liveness: Option<OwnerHeartbeat>,
    /// Whether a misconfiguration was logged already.
    pub(crate) noticed: Noticed,
}

impl<St> Shared<St> {
    /// What a new layer over `store` shares.
    pub(crate) fn new(store: St, config: Config) -> Self {
        let liveness = config.owner_heartbeat.clone();
        Self {
            store,
            liveness,
            config: Arc::new(config),
            executions: Executions::new(),
            local: Arc::default(),
            transactions: MaybeTransactions::default(),
            noticed: Noticed::default(),
        }
    }
}
