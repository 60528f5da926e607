//! Which responses are stored (contract §6) and what to do with a dead executor's claim (§5).

/// Which handler responses are stored and replayed. One policy serves both modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusPolicy {
    /// 2xx, 3xx and 4xx, except 408, 409, 425 and 429 (which ask the client to retry).
    #[default]
    Default,
    /// Also 5xx: Stripe's contract and the IETF draft's "success or an error".
    Store5xx,
    /// 2xx only: the seed experiment's choice.
    SuccessOnly,
}

impl StatusPolicy {
    /// Whether a response with this status is stored.
    pub fn stores(self, status: u16) -> bool {
        let retryable = matches!(status, 408 | 409 | 425 | 429);
        match self {
            Self::Default => (200..500).contains(&status) && !retryable,
            Self::Store5xx => (200..600).contains(&status) && !retryable,
            Self::SuccessOnly => (200..300).contains(&status),
        }
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
        assert!(p.stores(201) && p.stores(302) && p.stores(404) && p.stores(422));
        assert!(!p.stores(408) && !p.stores(409) && !p.stores(425) && !p.stores(429));
        assert!(!p.stores(500) && !p.stores(503) && !p.stores(101));
    }

    #[test]
    fn other_policies() {
        assert!(StatusPolicy::Store5xx.stores(500) && !StatusPolicy::Store5xx.stores(429));
        assert!(StatusPolicy::SuccessOnly.stores(201) && !StatusPolicy::SuccessOnly.stores(404));
    }
}
