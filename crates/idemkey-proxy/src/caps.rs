//! Per-actor caps in the proxy (behaviour [§11](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#11-security)):
//! one credential, or the shared anonymous actor, cannot fill the store for everyone else.
//! The store enforces them ([`idemkey_core::Store::with_caps`]), in the step that creates a
//! record, so several proxies on one store share each actor's caps; a refused request is
//! answered 429 `actor-cap-reached` and never reaches the upstream. This file reads them.

use idemkey_core::ActorCaps;
use serde::Deserialize;

use crate::error::{Error, Result};

/// A per-actor cap as written in the file or given as a flag: a whole number, `"unlimited"`,
/// or for bytes also a size with a binary unit (`"64MiB"`, `"500KiB"`, `"1GiB"`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum CapValue {
    /// A number: records, or bytes.
    Number(u64),
    /// `"unlimited"`, a number as text, or a size.
    Text(String),
}

/// The word that turns a cap off.
const UNLIMITED: &str = "unlimited";

impl CapValue {
    /// The cap on records it says, `None` for unlimited; `key` names it in the error.
    pub fn records(&self, key: &'static str) -> Result<Option<u64>> {
        self.cap(key, |text| {
            text.trim().parse::<u64>().ok().filter(|n| *n > 0)
        })
    }

    /// The cap on bytes it says, `None` for unlimited; `key` names it in the error.
    pub fn bytes(&self, key: &'static str) -> Result<Option<u64>> {
        self.cap(key, size)
    }

    /// The cap it says, a text other than `unlimited` read by `parse`; 0 is refused.
    fn cap(&self, key: &'static str, parse: fn(&str) -> Option<u64>) -> Result<Option<u64>> {
        let refused = || Error::ActorCap {
            key,
            value: self.to_string(),
        };
        match self {
            Self::Number(0) => Err(refused()),
            Self::Number(n) => Ok(Some(*n)),
            Self::Text(text) if text.trim() == UNLIMITED => Ok(None),
            Self::Text(text) => parse(text).map(Some).ok_or_else(refused),
        }
    }
}

impl std::fmt::Display for CapValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Text(text) => f.write_str(text),
        }
    }
}

impl std::str::FromStr for CapValue {
    type Err = std::convert::Infallible;

    /// A flag's value, as text: checked by [`CapValue::records`] or [`CapValue::bytes`].
    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        Ok(Self::Text(text.to_owned()))
    }
}

/// A size in bytes of at least 1: digits, then optionally `KiB`, `MiB` or `GiB`.
fn size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    let n: u64 = digits.parse().ok().filter(|&n| n > 0)?;
    n.checked_mul(1 << shift)
}

/// The caps two settings say, each `None` when not set.
pub(crate) fn actor_caps(
    records: Option<&CapValue>,
    bytes: Option<&CapValue>,
) -> Result<ActorCaps> {
    let mut caps = ActorCaps::new();
    if let Some(records) = records
        .map(|v| v.records("max_records_per_actor"))
        .transpose()?
    {
        caps = records.map_or(caps, |records| caps.max_records(records));
    }
    if let Some(bytes) = bytes.map(|v| v.bytes("max_bytes_per_actor")).transpose()? {
        caps = bytes.map_or(caps, |bytes| caps.max_bytes(bytes));
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(value: &str) -> CapValue {
        CapValue::Text(value.to_owned())
    }

    #[test]
    fn records_are_a_positive_number_or_unlimited() {
        assert_eq!(CapValue::Number(5).records("k").unwrap(), Some(5));
        assert_eq!(text("12").records("k").unwrap(), Some(12));
        assert_eq!(text("unlimited").records("k").unwrap(), None);
        for bad in [
            text("0"),
            CapValue::Number(0),
            text("-1"),
            text("lots"),
            text("1MiB"),
        ] {
            assert!(bad.records("k").is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes_take_binary_units() {
        assert_eq!(text("64MiB").bytes("k").unwrap(), Some(64 << 20));
        assert_eq!(text("500KiB").bytes("k").unwrap(), Some(500 << 10));
        assert_eq!(text("1000000").bytes("k").unwrap(), Some(1_000_000));
        assert_eq!(CapValue::Number(300).bytes("k").unwrap(), Some(300));
        assert_eq!(text("unlimited").bytes("k").unwrap(), None);
        for bad in [
            "0",
            "0MiB",
            "64MB",
            "MiB",
            "lots",
            "99999999999999999999GiB",
        ] {
            let message = text(bad)
                .bytes("max_bytes_per_actor")
                .unwrap_err()
                .to_string();
            assert!(message.contains("max_bytes_per_actor"), "{message}");
        }
    }

    #[test]
    fn unlimited_is_the_same_as_not_set() {
        let unlimited = text("unlimited");
        assert!(
            actor_caps(Some(&unlimited), Some(&unlimited))
                .unwrap()
                .is_unlimited()
        );
        assert!(actor_caps(None, None).unwrap().is_unlimited());
        assert!(
            !actor_caps(Some(&CapValue::Number(1)), None)
                .unwrap()
                .is_unlimited()
        );
    }
}
