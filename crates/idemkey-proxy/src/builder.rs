//! [`ProxyBuilder`]: the upstream, the store and the configuration a [`Proxy`] is made of.

use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{ActorCaps, Store};
use idemkey_tower::{Executions, OwnerHeartbeat};

use crate::actor::{ActorKey, ProxyActor};
use crate::config::ProxyConfig;
use crate::error::{Error, Result};
use crate::forward::Forward;
use crate::routes::{self, Shared};
use crate::server::Proxy;
use crate::upstream::Upstream;

/// Builds a [`Proxy`]; made by [`Proxy::builder`].
#[derive(Debug)]
#[must_use]
pub struct ProxyBuilder<S> {
    upstream: Upstream,
    store: S,
    config: ProxyConfig,
    retention: Duration,
    lease: Duration,
    owner_grace: Option<Duration>,
    secret: Option<Arc<[u8]>>,
    caps: Option<ActorCaps>,
}

impl<S: Store> ProxyBuilder<S> {
    pub(crate) fn new(upstream: Upstream, store: S) -> Self {
        Self {
            upstream,
            store,
            config: ProxyConfig::default(),
            retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(30),
            owner_grace: None,
            secret: None,
            caps: None,
        }
    }

    /// The covered routes, the actor's source and how the upstream is called. Defaults to
    /// an empty file's: POST and PATCH on every path, keys optional.
    pub fn config(mut self, config: ProxyConfig) -> Self {
        self.config = config;
        self
    }

    /// How long completed records are kept. Defaults to 24 h.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long a claim holds its key, renewed while the upstream works. Defaults to 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// This proxy's heartbeat as the owner of its claims (behaviour §8a): once it is `grace`
    /// old, the proxy's claims may be taken over, so a retry of a request whose proxy died is
    /// forwarded again after about `grace` rather than after the lease. One heartbeat for
    /// every route. Defaults to none: claims live by their leases alone.
    pub fn owner_grace(mut self, grace: Duration) -> Self {
        self.owner_grace = Some(grace);
        self
    }

    /// The secret behind derived keys. Defaults to the store's own, kept in the store, so
    /// the same for every proxy and restart.
    pub fn secret(mut self, secret: impl Into<Arc<[u8]>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Per-actor caps on live records and stored bytes (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)), in place of
    /// the configuration's `max_records_per_actor` and `max_bytes_per_actor`. None by
    /// default. A request of an actor at a cap that would create a record is answered 429
    /// `actor-cap-reached` with `Retry-After` and never forwarded; a retry of a stored key
    /// still replays. Every actor counts: each credential's digest, a trusted gateway's
    /// name, and the one `anonymous` actor that requests without credentials share.
    pub fn actor_caps(mut self, caps: ActorCaps) -> Self {
        self.caps = Some(caps);
        self
    }
}

impl<S: Store> ProxyBuilder<S> {
    /// The proxy, or the first configuration value that does not parse or is refused
    /// (per-actor caps included: [`crate::Error::CapsUnsupported`] from a store that cannot
    /// keep them).
    pub fn build(self) -> Result<Proxy<S>> {
        self.config.check()?;
        let caps = match self.caps {
            Some(caps) => caps,
            None => self.config.actor_caps()?,
        };
        // Setting caps fails only on a store that cannot keep them.
        let store = self
            .store
            .with_caps(caps)
            .map_err(|_| Error::CapsUnsupported)?;
        let executions = Executions::new();
        // Keyed by the configured secret if any, else by the store's, loaded by the first
        // request that needs it.
        let key = ActorKey::default();
        if let Some(secret) = self.secret.as_ref().filter(|secret| !secret.is_empty()) {
            key.set_from(secret);
        }
        let shared = Shared {
            actor: ProxyActor {
                key,
                source: self.config.actor.source()?,
                anonymous: self
                    .config
                    .actor
                    .anonymous
                    .then(|| self.config.actor.credential_headers())
                    .transpose()?
                    .map(Into::into),
                earlier: self.config.actor.earlier_digests,
            },
            retention: self.retention,
            lease: self.lease,
            owner: self.owner_grace.map(OwnerHeartbeat::new),
            secret: self.secret,
            executions: executions.clone(),
        };
        let forward = Forward::new(
            self.upstream,
            self.config.upstream.timeout()?,
            self.config.derived_key_header()?,
            self.config.upstream.release_unknown()?,
        );
        let service = routes::service(&store, &self.config.routes()?, &shared, forward);
        Ok(Proxy {
            store,
            service,
            executions,
            retention: self.retention,
        })
    }
}
