//! The layer's settings, with their documented defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use idemkey_core::{
    ClaimFlush, DEFAULT_LEASE, DEFAULT_RETENTION, ExpiredLease, StatusPolicy, retry_after,
};

use crate::{
    ActorExtension, DefaultOperation, IDEMPOTENCY_KEY, JsonSelection, MakeActor, MakeOperation,
    OwnerHeartbeat, ResponsePolicy,
};

/// One MiB, the default request body and response storage limit.
const MIB: usize = 1024 * 1024;

/// The default [`Config::in_flight_retry_after`]: most handlers answer within a second, and
/// `Retry-After` says nothing shorter.
const DEFAULT_IN_FLIGHT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// Settings of one [`IdempotencyLayer`](crate::IdempotencyLayer), or of an atomic-mode layer
/// (which holds no lease, so the lease settings do not apply to it). Every field has the
/// documented default; change them with the `#[must_use]` builder methods of the same name,
/// and apply them with [`IdempotencyLayer::with_config`](crate::IdempotencyLayer::with_config).
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// // With the facade: `use idemkey::{Config, DefaultOperation, IdempotencyLayer, MemoryStore};`
/// use idemkey_core::MemoryStore;
/// use idemkey_tower::{Config, DefaultOperation, IdempotencyLayer};
///
/// let config = Config::default()
///     .operation(DefaultOperation::new("v2").compatible_with("v1"))
///     .mismatch_status(StatusCode::CONFLICT)
///     .wait_in_flight(Duration::from_secs(5))
///     .secret(b"from the environment".as_slice());
/// assert_eq!(config.retention, Duration::from_secs(24 * 3600));
/// assert!(config.secret.is_some());
///
/// let layer = IdempotencyLayer::with_config(MemoryStore::new(), config);
/// assert_eq!(layer.config().wait_in_flight, Some(Duration::from_secs(5)));
/// ```
#[derive(Clone)]
pub struct Config {
    /// Methods whose `Idempotency-Key` is honoured; the header is ignored on the others.
    /// Defaults to POST and PATCH.
    pub methods: Vec<Method>,
    /// The request header that carries the key. Defaults to `Idempotency-Key`.
    pub key_header: HeaderName,
    /// Finds the request's actor. Defaults to [`ActorExtension`]: the
    /// [`Actor`](crate::Actor) that authentication put in the request extensions.
    pub actor: Arc<dyn MakeActor>,
    /// Whether a request without a key is rejected (400 `key-missing`) rather than run
    /// unrecorded. Defaults to `true`.
    pub require_key: bool,
    /// Names the operation of a request. Defaults to [`DefaultOperation`]: `METHOD route`, `v1`.
    pub operation: Arc<dyn MakeOperation>,
    /// Which handler responses are stored. Defaults to [`StatusPolicy::Default`]: 2xx, 3xx
    /// and business 4xx are stored; the statuses that reject a request as sent
    /// ([`REJECTION_STATUSES`](idemkey_core::REJECTION_STATUSES)) free the key; 5xx are
    /// released for a retry.
    pub status_policy: Arc<dyn ResponsePolicy>,
    /// What a duplicate does with an expired lease. Defaults to [`ExpiredLease::TakeOver`].
    pub expired_lease: ExpiredLease,
    /// The lease of a claim, renewed every third of it while the handler runs. Defaults to 30s.
    /// With [`Config::owner_grace`] it bounds only a live process whose handler is stuck;
    /// a dead one's claims are taken over after the grace.
    pub lease: Duration,
    /// This process's heartbeat as the owner of its claims (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)): with
    /// `Some(grace)`, the layer writes one heartbeat per process every quarter of the grace
    /// ([`Store::beat`](idemkey_core::Store::beat)) and each claim names this process, so a
    /// retry of a request whose process died or stalled is executed about `grace` after the
    /// last beat instead of when the lease runs out. A grace shorter than a stall the process
    /// may survive (a pause of the runtime, a slow store) hands its claims to another process
    /// whose execution fences this one's off. Defaults to `None`: claims live by their leases
    /// alone. Layers over one store may share one heartbeat: [`Config::owner_heartbeat`].
    pub owner_heartbeat: Option<OwnerHeartbeat>,
    /// When a lease-mode claim goes to disk. Defaults to [`ClaimFlush::Deferred`]: when the
    /// handler first asks [`Keys`](crate::Keys) for its derived keys, so a handler whose
    /// effects commit with the record pays no flush of its claim. [`ClaimFlush::OnClaim`]
    /// suits a handler that always makes an effect outside the store's database at once (a
    /// proxy forwarding every request): its claim is written durably in one step, which on
    /// PostgreSQL saves the round trip a later flush costs.
    pub claim_flush: ClaimFlush,
    /// How long a completed record is kept. Defaults to 24h.
    pub retention: Duration,
    /// The largest request body accepted (413 `payload-too-large` beyond). Defaults to 1 MiB.
    pub request_body_limit: usize,
    /// The largest response body stored; larger ones are stored without their body.
    /// Defaults to 1 MiB.
    pub storage_limit: usize,
    /// Which members of a JSON body the fingerprint covers. Defaults to
    /// [`JsonSelection::Whole`].
    pub fingerprint_json: JsonSelection,
    /// Request headers that are part of the fingerprint. Defaults to none.
    pub fingerprint_headers: Vec<HeaderName>,
    /// Response headers that belong to one request and are never replayed. Defaults to
    /// `x-request-id`, `traceparent` and `tracestate`.
    pub per_request_headers: Vec<HeaderName>,
    /// How long a duplicate waits for an in-flight original before answering 409.
    /// Defaults to `None`: answer 409 `request-in-flight` at once.
    pub wait_in_flight: Option<Duration>,
    /// The `Retry-After` of `request-in-flight`: when a retry is likely to find the
    /// original's answer. Defaults to 1s, the shortest `Retry-After` there is; set it near the
    /// route's usual execution time. Never more than what is left of the original's lease
    /// (by then it is stored or taken over), and sent in whole seconds, rounded up, at
    /// least one (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).
    pub in_flight_retry_after: Duration,
    /// The status of `key-reused`. Defaults to 422.
    pub mismatch_status: StatusCode,
    /// The secret behind derived keys. Defaults to `None`: the store's own
    /// ([`Store::secret`](idemkey_core::Store::secret)), made once and kept with the
    /// records, so every instance on the store derives the same keys across restarts. Set
    /// one only to share derived keys beyond one store; it is never empty.
    pub secret: Option<Arc<[u8]>>,
    /// The request header whose value is kept in the record. Defaults to `x-request-id`.
    pub request_id_header: HeaderName,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            key_header: IDEMPOTENCY_KEY,
            actor: Arc::new(ActorExtension),
            require_key: true,
            operation: Arc::new(DefaultOperation::default()),
            status_policy: Arc::new(StatusPolicy::default()),
            expired_lease: ExpiredLease::default(),
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            request_body_limit: MIB,
            storage_limit: MIB,
            fingerprint_json: JsonSelection::Whole,
            fingerprint_headers: Vec::new(),
            per_request_headers: vec![
                HeaderName::from_static("x-request-id"),
                HeaderName::from_static("traceparent"),
                HeaderName::from_static("tracestate"),
            ],
            wait_in_flight: None,
            in_flight_retry_after: DEFAULT_IN_FLIGHT_RETRY_AFTER,
            mismatch_status: StatusCode::UNPROCESSABLE_ENTITY,
            secret: None,
            request_id_header: HeaderName::from_static("x-request-id"),
            owner_heartbeat: None,
            claim_flush: ClaimFlush::Deferred,
        }
    }
}

impl Config {
    /// Sets [`Config::methods`].
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Sets [`Config::key_header`].
    #[must_use]
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.key_header = name;
        self
    }

    /// Sets [`Config::actor`].
    #[must_use]
    pub fn actor(mut self, actor: impl MakeActor) -> Self {
        self.actor = Arc::new(actor);
        self
    }

    /// Sets [`Config::require_key`].
    #[must_use]
    pub fn require_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// Sets [`Config::operation`].
    #[must_use]
    pub fn operation(mut self, operation: impl MakeOperation) -> Self {
        self.operation = Arc::new(operation);
        self
    }

    /// Sets [`Config::status_policy`].
    #[must_use]
    pub fn status_policy(mut self, policy: impl ResponsePolicy) -> Self {
        self.status_policy = Arc::new(policy);
        self
    }

    /// Sets [`Config::expired_lease`].
    #[must_use]
    pub fn expired_lease(mut self, policy: ExpiredLease) -> Self {
        self.expired_lease = policy;
        self
    }

    /// Sets [`Config::lease`].
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`Config::owner_grace`]: claims name this process, whose heartbeat keeps them
    /// alive, and are stale `grace` after its last beat.
    #[must_use]
    pub fn owner_grace(mut self, grace: Duration) -> Self {
        self.owner_heartbeat = Some(OwnerHeartbeat::new(grace));
        self
    }

    /// Sets [`Config::claim_flush`].
    #[must_use]
    pub fn claim_flush(mut self, flush: ClaimFlush) -> Self {
        self.claim_flush = flush;
        self
    }

    /// Sets [`Config::owner_heartbeat`] to `heartbeat`, which other layers over the same
    /// store may share: one owner and one heartbeat for all of them.
    #[must_use]
    pub fn owner_heartbeat(mut self, heartbeat: OwnerHeartbeat) -> Self {
        self.owner_heartbeat = Some(heartbeat);
        self
    }

    /// Sets [`Config::retention`].
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Sets [`Config::request_body_limit`], in bytes.
    #[must_use]
    pub fn request_body_limit(mut self, bytes: usize) -> Self {
        self.request_body_limit = bytes;
        self
    }

    /// Sets [`Config::storage_limit`], in bytes.
    #[must_use]
    pub fn storage_limit(mut self, bytes: usize) -> Self {
        self.storage_limit = bytes;
        self
    }

    /// Sets [`Config::fingerprint_json`].
    #[must_use]
    pub fn fingerprint_json(mut self, selection: JsonSelection) -> Self {
        self.fingerprint_json = selection;
        self
    }

    /// Adds a request header to [`Config::fingerprint_headers`].
    #[must_use]
    pub fn fingerprint_header(mut self, name: HeaderName) -> Self {
        self.fingerprint_headers.push(name);
        self
    }

    /// Sets [`Config::per_request_headers`].
    #[must_use]
    pub fn per_request_headers(mut self, names: impl IntoIterator<Item = HeaderName>) -> Self {
        self.per_request_headers = names.into_iter().collect();
        self
    }

    /// Sets [`Config::wait_in_flight`] to wait up to `bound`.
    #[must_use]
    pub fn wait_in_flight(mut self, bound: Duration) -> Self {
        self.wait_in_flight = Some(bound);
        self
    }

    /// Sets [`Config::in_flight_retry_after`].
    #[must_use]
    pub fn in_flight_retry_after(mut self, after: Duration) -> Self {
        self.in_flight_retry_after = after;
        self
    }

    /// Sets [`Config::mismatch_status`].
    #[must_use]
    pub fn mismatch_status(mut self, status: StatusCode) -> Self {
        self.mismatch_status = status;
        self
    }

    /// Sets [`Config::secret`]. An empty secret is ignored (with a warning): derived keys
    /// are never made from one.
    #[must_use]
    pub fn secret(mut self, secret: impl Into<Arc<[u8]>>) -> Self {
        let secret = secret.into();
        if secret.is_empty() {
            tracing::warn!("ignoring an empty secret: derived keys use the store's secret");
            self.secret = None;
        } else {
            self.secret = Some(secret);
        }
        self
    }

    /// Sets [`Config::request_id_header`].
    #[must_use]
    pub fn request_id_header(mut self, name: HeaderName) -> Self {
        self.request_id_header = name;
        self
    }

    /// Whether the key of a request with this method is honoured.
    pub fn honours(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// The `Retry-After` of `request-in-flight` for an original whose lease ends within
    /// `lease_remaining`: [`Config::in_flight_retry_after`], capped by it.
    pub(crate) fn in_flight_retry(&self, lease_remaining: Duration) -> Duration {
        retry_after(self.in_flight_retry_after.min(lease_remaining))
    }

    /// How often the lease is renewed while the handler runs; `None` for a zero lease.
    pub fn heartbeat_every(&self) -> Option<Duration> {
        Some(self.lease / 3).filter(|every| !every.is_zero())
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret is left out on purpose: Debug output ends up in logs.
        f.debug_struct("Config")
            .field("methods", &self.methods)
            .field("key_header", &self.key_header)
            .field("require_key", &self.require_key)
            .field("expired_lease", &self.expired_lease)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("request_body_limit", &self.request_body_limit)
            .field("storage_limit", &self.storage_limit)
            .field("fingerprint_json", &self.fingerprint_json)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .field("per_request_headers", &self.per_request_headers)
            .field("wait_in_flight", &self.wait_in_flight)
            .field("in_flight_retry_after", &self.in_flight_retry_after)
            .field("mismatch_status", &self.mismatch_status)
            .field("request_id_header", &self.request_id_header)
            .field("owner_heartbeat", &self.owner_heartbeat)
            .field("claim_flush", &self.claim_flush)
            .finish_non_exhaustive()
    }
}
