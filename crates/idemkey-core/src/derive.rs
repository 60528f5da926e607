//! Derived keys for external side effects (behaviour [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode)).

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::RecordId;

/// The length of a secret made by [`DerivedKeys::generate_secret`]: 256 bits.
pub const SECRET_LEN: usize = 32;

/// Keys a lease-mode handler passes to external systems' own idempotency mechanisms:
/// `HMAC-SHA256(server secret, record id ‖ purpose)`, hex-encoded.
///
/// The record id is the same across lease takeovers and releases, and new after retention
/// expiry, so a re-execution repeats each external call under the same key.
///
/// ```
/// use idemkey_core::{DerivedKeys, RecordId}; // `idemkey::{...}` with the facade
///
/// let keys = DerivedKeys::new(b"server secret".as_slice(), RecordId::new());
/// assert_eq!(keys.key("send-email"), keys.key("send-email"));
/// assert_ne!(keys.key("send-email"), keys.key("charge-card"));
/// ```
#[derive(Clone)]
pub struct DerivedKeys {
    secret: Arc<[u8]>,
    record_id: RecordId,
}

impl DerivedKeys {
    /// Keys for one record under the server's secret.
    pub fn new(secret: impl Into<Arc<[u8]>>, record_id: RecordId) -> Self {
        Self {
            secret: secret.into(),
            record_id,
        }
    }

    /// The key for one purpose (`"charge"`, `"email:welcome"`): 64 hex characters.
    pub fn key(&self, purpose: &str) -> String {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        // The record id has a fixed length, so id ‖ purpose is unambiguous.
        mac.update(self.record_id.as_bytes());
        mac.update(purpose.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A new random secret of [`SECRET_LEN`] bytes, for a store to keep (see
    /// [`crate::Store::secret`]).
    pub fn generate_secret() -> crate::Result<[u8; SECRET_LEN]> {
        let mut secret = [0; SECRET_LEN];
        getrandom::fill(&mut secret).map_err(|e| crate::Error::Backend(Box::new(e)))?;
        Ok(secret)
    }

    /// The record these keys derive from.
    pub fn record_id(&self) -> RecordId {
        self.record_id
    }
}

impl fmt::Debug for DerivedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DerivedKeys")
            .field("record_id", &self.record_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_secret_record_and_purpose() {
        let id = RecordId::new();
        let a = DerivedKeys::new(b"s1".as_slice(), id);
        assert_eq!(a.key("p").len(), 64);
        assert_ne!(a.key("p"), DerivedKeys::new(b"s2".as_slice(), id).key("p"));
        assert_ne!(
            a.key("p"),
            DerivedKeys::new(b"s1".as_slice(), RecordId::new()).key("p")
        );
    }
}
