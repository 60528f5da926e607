//! Redis key names: one hash per record, named by a digest of its scope inside a hash tag.

use idemkey_core::{Error, Result, Scope};
use sha2::{Digest, Sha256};

/// The key prefix a store uses unless told otherwise.
pub const DEFAULT_PREFIX: &str = "idemkey";

/// Separates this layout's digests from any other use of SHA-256 over the same bytes.
const DOMAIN: &[u8] = b"idemkey-redis/record/v1";

/// The same for actors' ledgers.
const LEDGER_DOMAIN: &[u8] = b"idemkey-redis/actor/v1";

/// The names of a store's keys, all under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: std::sync::Arc<str>,
}

impl Keys {
    /// Keys under `prefix`. Braces are refused: Redis Cluster hashes only the first `{…}` of a
    /// key, so a brace in the prefix would take the hash tag's place.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        if prefix.contains(['{', '}']) {
            return Err(Error::Backend(
                format!("a Redis key prefix may not contain braces: {prefix:?}").into(),
            ));
        }
        Ok(Self {
            prefix: prefix.into(),
        })
    }

    /// `{prefix}:{<hex digest>}`: the braces are a hash tag, so a script on the record touches
    /// one slot; the digest makes the key fixed-length whatever bytes the scope holds.
    pub(crate) fn record(&self, scope: &Scope) -> String {
        format!("{}:{{{}}}", self.prefix, hex::encode(digest(scope)))
    }

    /// `{prefix}:owner:<hex id>`: an owner's heartbeat, present while the owner is alive.
    pub(crate) fn owner(&self, owner: idemkey_core::OwnerId) -> String {
        format!("{}:owner:{}", self.prefix, hex::encode(owner.as_bytes()))
    }

    /// `{prefix}:beats`: the run of owners' beats without a gap (`lua/beat.lua`); its name is
    /// also derived from an owner's key in `lua/common.lua`.
    pub(crate) fn beats(&self) -> String {
        format!("{}:beats", self.prefix)
    }

    /// `{prefix}:actor:{<hex digest>}` and the same with `:bytes`: an actor's ledger under
    /// per-actor caps, two keys of one slot (one hash tag, the actor's digest).
    pub(crate) fn ledger(&self, actor: &str) -> [String; 2] {
        let mut hash = Sha256::new();
        hash.update(LEDGER_DOMAIN);
        hash.update(actor.as_bytes());
        let set = format!("{}:actor:{{{}}}", self.prefix, hex::encode(hash.finalize()));
        let bytes = format!("{set}:bytes");
        [set, bytes]
    }

    /// The `SCAN` pattern of every record key (`{prefix}:{` 64 characters `}`), the prefix's
    /// glob characters escaped: neither the secret nor anything else under the prefix matches.
    pub(crate) fn record_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 68);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str(":{");
        pattern.push_str(&"?".repeat(64));
        pattern.push('}');
        pattern
    }

    /// `{prefix}:secret`: the derived-key secret, kept apart from every record.
    pub(crate) fn secret(&self) -> String {
        format!("{}:secret", self.prefix)
    }
}

/// SHA-256 of the length-prefixed actor, operation and key: length prefixes keep
/// (`ab`, `c`) and (`a`, `bc`) apart.
fn digest(scope: &Scope) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(DOMAIN);
    for part in [
        scope.actor.as_bytes(),
        scope.operation.as_bytes(),
        scope.key.as_str().as_bytes(),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use idemkey_core::{Key, Operation};

    fn scope(actor: &str, op: &str) -> Scope {
        Scope::new(actor, &Operation::new(op, "v1"), Key::parse(b"k").unwrap())
    }

    #[test]
    fn fields_never_run_into_each_other() {
        let keys = Keys::new(DEFAULT_PREFIX).unwrap();
        assert_ne!(
            keys.record(&scope("ab", "c")),
            keys.record(&scope("a", "bc"))
        );
        assert_eq!(keys.record(&scope("a", "b")), keys.record(&scope("a", "b")));
    }

    #[test]
    fn record_keys_carry_one_hash_tag_of_fixed_length() {
        let keys = Keys::new("app:idem").unwrap();
        let key = keys.record(&scope("actor \"{x}\"\n", "op"));
        assert!(key.starts_with("app:idem:{") && key.ends_with('}'));
        assert_eq!(key.len(), "app:idem:{}".len() + 64);
        assert_eq!(keys.secret(), "app:idem:secret");
        let [set, bytes] = keys.ledger("actor {x}");
        assert!(set.starts_with("app:idem:actor:{") && set.ends_with('}'));
        assert_eq!(bytes, format!("{set}:bytes"));
    }

    #[test]
    fn the_record_pattern_escapes_the_prefix() {
        let keys = Keys::new("app*[x]").unwrap();
        let pattern = keys.record_pattern();
        assert_eq!(pattern, format!("app\\*\\[x\\]:{{{}}}", "?".repeat(64)));
        assert_eq!(keys.record(&scope("a", "b")).len(), pattern.len() - 3);
    }

    #[test]
    fn braces_in_the_prefix_are_refused() {
        assert!(Keys::new("a{b").is_err());
        assert!(Keys::new("a}b").is_err());
    }
}
