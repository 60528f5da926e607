//! Atomic mode (behaviour [§8](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8-atomic-mode)): the claim, the caller's business writes and the stored
//! response commit in one transaction, or none of them does.
//!
//! [`SqlxStore::execute`] runs a handler so, by either [`Strategy`]; [`SqlxStore::begin_atomic`]
//! and [`SqlxStore::complete_atomic`] are its steps for a caller that drives the transaction
//! itself. Each file uses only those after it in this order, never one before:
//! `commit_time`, `claim_first`, `begin`, `claim`, `lookup`, `outcome`, `handler`, `options`,
//! `coalescing`.

mod begin;
mod claim;
mod claim_first;
pub(crate) mod coalescing;
mod commit_time;
mod handler;
mod lookup;
mod options;
mod outcome;

use idemkey_core::ClaimRequest;

pub use claim::{AtomicBegin, AtomicClaim};
pub use handler::{AtomicHandler, AtomicResponse, HandlerFn, HandlerResult, handler_fn};
pub use lookup::AtomicLookup;
pub use options::{AtomicOptions, Strategy};
pub use outcome::{AtomicError, Outcome};

use crate::{Backend, SqlxStore};

impl<DB: Backend> SqlxStore<DB> {
    /// Runs `handler` in atomic mode: claim, business writes and stored response in one
    /// transaction, committed if and only if the policy stores the response.
    pub async fn execute<H: AtomicHandler<DB>>(
        &self,
        request: &ClaimRequest,
        options: &AtomicOptions,
        handler: &mut H,
    ) -> Result<Outcome<H::Response>, AtomicError<H::Error>> {
        match options.strategy {
            Strategy::ClaimFirst => {
                self.execute_claim_first(request, options, handler, None)
                    .await
            }
            Strategy::CommitTime => self.execute_commit_time(request, options, handler).await,
        }
    }
}
