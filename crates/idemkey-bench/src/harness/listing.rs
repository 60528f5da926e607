//! The storm's check counts notes in `GET /v1/notes`, which lists every note of the bench's
//! actor: up to [`MAX_LIST_BODY`](super::limits::MAX_LIST_BODY) of them. The list is counted
//! as it is parsed and no note is kept, because a parsed tree (`serde_json::Value`) costs
//! several times its text — over 10 times for a hostile `[0,0,0,...]` — where this costs the
//! body alone.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// How many notes of the list `body` (`{"notes": [{"title": ...}, ...]}`) are titled after
/// each of `keys`; other notes and other fields are skipped.
///
/// The error never quotes the body (serde's messages may quote a value it sent): it says
/// where the list stopped being one.
pub(crate) fn count_titles<'k>(
    body: &[u8],
    keys: &'k [String],
) -> anyhow::Result<HashMap<&'k str, u64>> {
    let mut counts = keys.iter().map(|key| (key.as_str(), 0)).collect();
    let mut parser = serde_json::Deserializer::from_slice(body);
    let found = Listing(&mut counts)
        .deserialize(&mut parser)
        .and_then(|found| parser.end().map(|()| found))
        .map_err(|error| {
            anyhow::anyhow!(
                "GET /v1/notes is not a list of notes ({:?} error at line {}, column {})",
                error.classify(),
                error.line(),
                error.column()
            )
        })?;
    anyhow::ensure!(found, "GET /v1/notes has no notes array");
    Ok(counts)
}

/// The list's object: the notes in its `notes` array are counted, other fields skipped.
/// Its value is whether there was a `notes` array.
struct Listing<'c, 'k>(&'c mut HashMap<&'k str, u64>);

impl<'de> DeserializeSeed<'de> for Listing<'_, '_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Listing<'_, '_> {
    type Value = bool;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object with a notes array")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(field) = map.next_key::<Cow<'de, str>>()? {
            if field == "notes" {
                map.next_value_seed(Notes(&mut *self.0))?;
                found = true;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The `notes` array: each note adds one to its title's count, then is dropped.
struct Notes<'c, 'k>(&'c mut HashMap<&'k str, u64>);

impl<'de> DeserializeSeed<'de> for Notes<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Notes<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an array of notes")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(note) = seq.next_element::<Titled<'de>>()? {
            if let Some(count) = note.title.as_deref().and_then(|t| self.0.get_mut(t)) {
                *count += 1;
            }
        }
        Ok(())
    }
}

/// A note, of which only the title matters; borrowed from the body unless it has escapes.
#[derive(Deserialize)]
struct Titled<'a> {
    #[serde(borrow, default)]
    title: Option<Cow<'a, str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<String> {
        vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]
    }

    #[test]
    fn titles_of_the_keys_are_counted_and_the_rest_skipped() {
        let body = br#"{"before": {"x": [1, 2]}, "notes": [
            {"id": "1", "title": "a", "created_at": "t"},
            {"id": "2", "title": "\u0062"},
            {"id": "3", "title": "b"},
            {"id": "4", "title": "other"},
            {"id": "5"}
        ], "after": null}"#;
        let keys = keys();
        let counts = count_titles(body, &keys).unwrap();
        assert_eq!((counts["a"], counts["b"], counts["c"]), (1, 2, 0));
    }

    #[test]
    fn what_is_not_a_list_is_an_error_that_quotes_nothing() {
        let keys = keys();
        let no_notes = count_titles(br#"{"items": []}"#, &keys).unwrap_err();
        assert_eq!(no_notes.to_string(), "GET /v1/notes has no notes array");
        for body in [
            &br#"{"notes": "\u001b[2J secret"}"#[..],
            br#"{"notes": [{"title": 12345678}]}"#,
            br#"{"notes": []} trailing"#,
            b"[0,0,0]",
            b"",
        ] {
            let error = count_titles(body, &keys).unwrap_err().to_string();
            assert!(
                error.starts_with("GET /v1/notes is not a list of notes ("),
                "{error}"
            );
            assert!(
                !error.contains("secret") && !error.contains("12345678"),
                "{error}"
            );
        }
    }
}
