//! Which responses are stored (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored)) and what to do with a dead executor's claim (behaviour [§5](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#5-decisions)).

/// What becomes of a claim once its handler has answered.
///
/// Handlers can also decide it for one response, whatever its status, by putting a
/// `Verdict` in the response's extensions, which the idempotency layer reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Store the response: every retry with the key replays it.
    Store,
    /// Do not store it, and keep the record for a retry that executes again under the same
    /// record id (so the same derived keys). Atomic mode rolls everything back.
    Release,
    /// The request was rejected as sent and nothing was done: free the key, so that a
    /// corrected request can use it (a record this request created is deleted). A record
    /// with an earlier attempt behind it is only released, since that attempt may have had
    /// effects under its derived keys. Atomic mode rolls everything back.
    Reject,
}

/// The statuses that reject a request's shape, credentials or timing: the handler did
/// nothing, so they are never stored and free the key ([`Verdict::Reject`]), whatever the
/// policy (except [`StatusPolicy::SuccessOnly`], which stores none of them either).
pub const REJECTION_STATUSES: [u16; 16] = [
    400, 401, 403, 404, 405, 406, 408, 409, 411, 413, 414, 415, 422, 425, 429, 431,
];

/// Which handler responses are stored and replayed. One policy serves both modes.
///
/// | status | `Default` | `Store5xx` | `SuccessOnly` |
/// | --- | --- | --- | --- |
/// | 2xx | store | store | store |
/// | 3xx | store | store | release |
/// | [`REJECTION_STATUSES`] (400, 401, 403, 404, 405, 406, 408, 409, 411, 413, 414, 415, 422, 425, 429, 431) | reject | reject | reject |
/// | other 4xx (402, 410, 412, 418, 423, 424, 451, ...) | store | store | release |
/// | 5xx | release | store | release |
/// | 1xx and anything else | release | release | release |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusPolicy {
    /// 2xx, 3xx and the 4xx that state a business outcome of the executed request (402,
    /// 410, ...); not the [`REJECTION_STATUSES`], not 5xx.
    #[default]
    Default,
    /// The default, and also 5xx: Stripe's contract and the IETF draft's "success or an
    /// error".
    Store5xx,
    /// 2xx only: the seed experiment's choice.
    SuccessOnly,
}

impl StatusPolicy {
    /// What becomes of a claim whose handler answered with this status.
    pub fn verdict(self, status: u16) -> Verdict {
        if REJECTION_STATUSES.contains(&status) {
            return Verdict::Reject;
        }
        let stored = match self {
            Self::Default => (200..500).contains(&status),
            Self::Store5xx => (200..600).contains(&status),
            Self::SuccessOnly => (200..300).contains(&status),
        };
        if stored {
            Verdict::Store
        } else {
            Verdict::Release
        }
    }

    /// Whether a response with this status is stored.
    pub fn stores(self, status: u16) -> bool {
        self.verdict(status) == Verdict::Store
    }
}

/// What a duplicate does when it finds an in-flight record whose lease has expired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExpiredLease {
    /// Take over with a new fencing token and execute again (the default).
    #[default]
    TakeOver,
    /// Complete the record with a stored 500 `previous-attempt-unknown`, replayed until expiry.
    PreviousAttemptUnknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy() {
        let p = StatusPolicy::Default;
        assert!(p.stores(201) && p.stores(302) && p.stores(402) && p.stores(410));
        for status in REJECTION_STATUSES {
            assert_eq!(p.verdict(status), Verdict::Reject, "{status}");
        }
        assert_eq!(p.verdict(500), Verdict::Release);
        assert_eq!(p.verdict(503), Verdict::Release);
        assert_eq!(p.verdict(101), Verdict::Release);
    }

    #[test]
    fn other_policies() {
        assert!(StatusPolicy::Store5xx.stores(500) && !StatusPolicy::Store5xx.stores(429));
        assert_eq!(StatusPolicy::Store5xx.verdict(422), Verdict::Reject);
        assert!(StatusPolicy::SuccessOnly.stores(201) && !StatusPolicy::SuccessOnly.stores(302));
        assert_eq!(StatusPolicy::SuccessOnly.verdict(410), Verdict::Release);
        assert_eq!(StatusPolicy::SuccessOnly.verdict(404), Verdict::Reject);
    }
}
