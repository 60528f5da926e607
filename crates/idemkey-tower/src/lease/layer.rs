//! [`IdempotencyLayer`]: applies [`Idempotency`] to a service.

use tower::Layer;

use super::Idempotency;
use super::shared::Shared;
use crate::{Config, Executions};

/// Layer that applies the [`Idempotency`] middleware, in lease mode, with one store and
/// [`Config`].
///
/// Place it inside the authentication layer (which provides the [`Actor`](crate::Actor)) and
/// inside any compression layer (so stored bodies are uncompressed).
#[derive(Clone, Debug)]
pub struct IdempotencyLayer<St> {
    /// What its services share, and their requests.
    pub(crate) shared: Shared<St>,
}

impl<St> IdempotencyLayer<St> {
    /// A layer over `store` with the default [`Config`].
    pub fn new(store: St) -> Self {
        Self::with_config(store, Config::default())
    }

    /// A layer over `store` with `config`.
    pub fn with_config(store: St, config: Config) -> Self {
        Self {
            shared: Shared::new(store, config),
        }
    }

    /// The same layer, counting its executions in `executions` (shared with other layers).
    #[must_use]
    pub fn with_executions(mut self, executions: Executions) -> Self {
        self.shared.executions = executions;
        self
    }

    /// The executions this layer runs in tasks of their own: wait for them at shutdown.
    pub fn executions(&self) -> &Executions {
        &self.shared.executions
    }

    /// How many duplicates wait in this process for an execution of this layer to end. A
    /// duplicate waiting there asks the store nothing, so tests read this to know it waits.
    #[doc(hidden)]
    pub fn waiting_duplicates(&self) -> usize {
        self.shared.local.waiting()
    }

    /// The layer's settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }
}

impl<S, St: Clone> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency::from_shared(inner, self.shared.clone())
    }
}
