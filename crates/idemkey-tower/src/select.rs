//! Which members of a JSON body the fingerprint covers (behaviour [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)).

use idemkey_core::fingerprint::canonical_json;
use serde_json::Value;

/// Which parts of a JSON request body the fingerprint covers, by
/// [JSON Pointer](https://www.rfc-editor.org/rfc/rfc6901) (`/amount`, `/items/0/sku`).
///
/// A retry that differs only outside the selection counts as the same request (a client
/// timestamp, a trace id in the body). The selection applies only to a body that
/// canonicalises losslessly; any other body, and any body that is not JSON, is fingerprinted
/// whole, so a selection can never make two requests that differ inside it look equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum JsonSelection {
    /// The whole body (the default).
    #[default]
    Whole,
    /// Only these members; a missing member counts as absent (not as `null`).
    Include(Vec<String>),
    /// Everything but these members.
    Exclude(Vec<String>),
}

impl JsonSelection {
    /// The bytes to fingerprint instead of `body`, or `None` to fingerprint it whole.
    pub(crate) fn select(&self, body: &[u8]) -> Option<Vec<u8>> {
        if *self == Self::Whole {
            return None;
        }
        let canonical = canonical_json(body)?;
        // serde_json's `Value` (with the workspace's `raw_value` feature) reads an object with
        // this member as raw JSON text: such a body is fingerprinted whole, never selected.
        if memchr_str(&canonical, b"$serde_json::private::RawValue") {
            return None;
        }
        let mut value: Value = serde_json::from_slice(&canonical).ok()?;
        let selected = match self {
            Self::Whole => return None,
            Self::Include(pointers) => Value::Object(
                pointers
                    .iter()
                    .filter_map(|p| value.pointer(p).map(|v| (p.clone(), v.clone())))
                    .collect(),
            ),
            Self::Exclude(pointers) => {
                for pointer in pointers {
                    remove(&mut value, pointer);
                }
                value
            }
        };
        serde_json::to_vec(&selected).ok()
    }
}

fn memchr_str(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Removes the member or element `pointer` names, if there is one.
fn remove(value: &mut Value, pointer: &str) {
    let Some((parent, token)) = pointer.rsplit_once('/') else {
        return;
    };
    let token = token.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(members)) => {
            members.remove(&token);
        }
        Some(Value::Array(elements)) => {
            if let Ok(index) = token.parse::<usize>()
                && index < elements.len()
            {
                elements.remove(index);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exclude(pointers: &[&str]) -> JsonSelection {
        JsonSelection::Exclude(pointers.iter().map(|p| (*p).to_owned()).collect())
    }

    #[test]
    fn excluded_members_do_not_count() {
        let selection = exclude(&["/sent_at", "/meta/trace"]);
        let a = selection.select(br#"{"amount":5,"sent_at":"10:00","meta":{"trace":"x","v":1}}"#);
        let b = selection.select(br#"{"meta":{"v":1,"trace":"y"},"sent_at":"10:01","amount":5}"#);
        assert!(a.is_some());
        assert_eq!(a, b);
        let other = selection.select(br#"{"amount":6,"sent_at":"10:00","meta":{"v":1}}"#);
        assert_ne!(a, other);
    }

    #[test]
    fn only_included_members_count_and_absent_is_not_null() {
        let selection = JsonSelection::Include(vec!["/amount".into(), "/currency".into()]);
        let a = selection.select(br#"{"amount":5,"currency":"EUR","note":"a"}"#);
        let b = selection.select(br#"{"note":"b","currency":"EUR","amount":5}"#);
        assert_eq!(a, b);
        let absent = selection.select(br#"{"amount":5}"#);
        let null = selection.select(br#"{"amount":5,"currency":null}"#);
        assert_ne!(absent, null);
    }

    #[test]
    fn bodies_that_do_not_canonicalise_are_whole() {
        let selection = exclude(&["/t"]);
        assert_eq!(selection.select(b"not json"), None);
        assert_eq!(
            selection.select(br#"{"a":1,"a":2,"t":0}"#),
            None,
            "repeated member"
        );
        assert_eq!(
            selection.select(br#"{"a":1.00000000000000000001,"t":0}"#),
            None,
            "lossy"
        );
        let raw = br#"{"$serde_json::private::RawValue":"[1]","t":0}"#;
        assert_eq!(selection.select(raw), None);
        assert_eq!(JsonSelection::Whole.select(br#"{"t":0}"#), None);
    }
}
