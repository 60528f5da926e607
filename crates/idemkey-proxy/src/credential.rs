//! One client's credential, as a maintenance tool is given it, and the actors the proxy keeps
//! that client's records under: so that `idemkey forget --proxy-credential` finds them
//! without the credential ever being stored, printed or logged.

use http::{HeaderMap, HeaderName, HeaderValue};
use idemkey_core::Store;

use crate::actor::request_actors;
use crate::config::ActorConfig;
use crate::error::{Error, Result};

/// A credential as a client sends it: one header. `Debug` never shows its value.
#[derive(Clone)]
pub struct Credential(HeaderMap);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(..)")
    }
}

impl Credential {
    /// Reads a line `NAME: VALUE` (`Authorization: Bearer T`), the value trimmed and
    /// non-empty.
    pub fn parse(line: &str) -> Result<Self> {
        let (name, value) = line.split_once(':').ok_or(Error::CredentialLine)?;
        let name =
            HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| Error::CredentialLine)?;
        let value = value.trim();
        if value.is_empty() {
            return Err(Error::CredentialLine);
        }
        let value = HeaderValue::from_str(value).map_err(|_| Error::CredentialLine)?;
        let mut headers = HeaderMap::new();
        headers.insert(name, value);
        Ok(Self(headers))
    }

    /// Refuses a credential that the proxy, with `config`'s `[actor]` settings, does not
    /// read: whatever the secret, such a request has no actor of its own.
    pub fn check(&self, config: &ActorConfig) -> Result<()> {
        if request_actors(config, b"-", &self.0)?.is_empty() {
            return Err(Error::CredentialUnread);
        }
        Ok(())
    }

    /// The actors the proxy keeps this credential's records under ([`request_actors`]): the
    /// digests keyed by `secret`, the proxy's `--secret`, or when `None` by `store`'s own.
    pub async fn actors(
        &self,
        config: &ActorConfig,
        secret: Option<&[u8]>,
        store: &impl Store,
    ) -> Result<Vec<String>> {
        match secret {
            Some(secret) => request_actors(config, secret, &self.0),
            None => {
                let secret = store.secret().await.map_err(Error::StoreSecret)?;
                request_actors(config, &secret, &self.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use idemkey_core::MemoryStore;

    use super::*;

    #[test]
    fn a_line_without_a_name_or_a_value_is_refused_without_showing_it() {
        for line in [
            "Bearer secret-token",
            "Authorization:",
            "Authorization:   ",
            ": v",
        ] {
            let error = Credential::parse(line).unwrap_err().to_string();
            assert!(!error.contains("secret-token"), "{error}");
            assert!(matches!(
                Credential::parse(line),
                Err(Error::CredentialLine)
            ));
        }
        let credential = Credential::parse("Authorization: Bearer secret-token").unwrap();
        assert_eq!(format!("{credential:?}"), "Credential(..)");
    }

    #[tokio::test]
    async fn the_actors_are_the_digests_under_the_secret_given_or_else_the_stores() {
        let config = ActorConfig::default();
        let credential = Credential::parse("Authorization: Bearer t").unwrap();
        credential.check(&config).unwrap();
        let store = MemoryStore::new();
        let given = credential
            .actors(&config, Some(b"s"), &store)
            .await
            .unwrap();
        assert_eq!(given, request_actors(&config, b"s", &credential.0).unwrap());
        let own = store.secret().await.unwrap();
        let stored = credential.actors(&config, None, &store).await.unwrap();
        assert_eq!(
            stored,
            request_actors(&config, &own, &credential.0).unwrap()
        );
        assert_ne!(given, stored);
    }

    #[test]
    fn a_header_the_proxy_does_not_read_is_refused() {
        let credential = Credential::parse("X-Api-Key: k").unwrap();
        assert!(matches!(
            credential.check(&ActorConfig::default()),
            Err(Error::CredentialUnread)
        ));
    }
}
