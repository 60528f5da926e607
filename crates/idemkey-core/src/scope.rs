//! Who did what under which key (behaviour [§1](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#1-words-and-guarantees), [§3](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#3-scope)).

use std::fmt;

use crate::Key;

/// An operation: a server-side constant name and its version, written `name:version`.
///
/// The name is part of the scope; the version is stored in the record and compared like the
/// fingerprint, so a deploy that bumps it never turns a retry into a second execution.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Operation {
    name: String,
    version: String,
    compatible: Vec<String>,
}

impl Operation {
    /// An operation with a name (`create-note`) and a version (`v1`).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            compatible: Vec::new(),
        }
    }

    /// Declares records written by `version` compatible with this one: retries across the
    /// two are compared by fingerprint only.
    #[must_use]
    pub fn compatible_with(mut self, version: impl Into<String>) -> Self {
        self.compatible.push(version.into());
        self
    }

    /// The operation's name, part of the scope.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operation's version, stored in the record.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether a record written by `stored` may answer a request of this version.
    pub fn accepts_version(&self, stored: &str) -> bool {
        stored == self.version || self.compatible.iter().any(|v| v == stored)
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.version)
    }
}

/// The identity of a record: (actor, operation name, key).
///
/// The actor comes from authentication, never from the request: a response is only ever
/// replayed to the actor that caused it (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The stable owner of what the request creates (tenant, account).
    pub actor: String,
    /// The operation's name, without its version.
    pub operation: String,
    /// The client's key.
    pub key: Key,
}

impl Scope {
    /// A scope for `actor` running `operation` under `key`.
    pub fn new(actor: impl Into<String>, operation: &Operation, key: Key) -> Self {
        Self {
            actor: actor.into(),
            operation: operation.name().to_owned(),
            key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_unless_declared_compatible() {
        let v2 = Operation::new("create-note", "v2");
        assert!(!v2.accepts_version("v1"));
        assert!(v2.clone().compatible_with("v1").accepts_version("v1"));
        assert_eq!(v2.to_string(), "create-note:v2");
    }

    #[test]
    fn scope_ignores_the_version() {
        let key: Key = "k".parse().unwrap();
        let a = Scope::new("actor", &Operation::new("op", "v1"), key.clone());
        let b = Scope::new("actor", &Operation::new("op", "v2"), key);
        assert_eq!(a, b);
    }
}
