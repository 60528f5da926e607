//! Counting resources through the list endpoint.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::exchange::id_text;

/// The distinct resource ids of a list response.
pub(crate) type Ids = BTreeSet<String>;

/// The ids in the first array of `body` (a top-level array, or the first array found inside an
/// object, depth first, members in key order): each element's `id` field, or the element itself
/// when it is a string or a number.
pub(crate) fn list_ids(body: &Value) -> Option<Ids> {
    let items = first_array(body)?;
    let ids = items.iter().map(|item| {
        item.get("id")
            .and_then(id_text)
            .or_else(|| id_text(item))
            .unwrap_or_else(|| item.to_string())
    });
    Some(ids.collect())
}

fn first_array(value: &Value) -> Option<&Vec<Value>> {
    match value {
        Value::Array(items) => Some(items),
        Value::Object(members) => members.values().find_map(first_array),
        _ => None,
    }
}

/// The ids in `after` that were not in `before`.
pub(crate) fn added(before: &Ids, after: &Ids) -> Vec<String> {
    after.difference(before).cloned().collect()
}

/// Evidence about how many resources a list shows were added, and whether that is `expected`.
pub(crate) fn describe_added(added: Option<&[String]>, expected: usize) -> Result<String, String> {
    let Some(added) = added else {
        return Ok("list not checked (no --list)".to_owned());
    };
    let shown = added.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    let text = format!("list +{}", added.len());
    if added.len() == expected {
        Ok(text)
    } else {
        Err(format!("{text} ({shown}), expected +{expected}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ids(values: &[&str]) -> Ids {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn finds_the_first_array() {
        let body = json!({"count": 2, "notes": [{"id": "a"}, {"id": "b"}, {"id": "a"}]});
        assert_eq!(list_ids(&body), Some(ids(&["a", "b"])));
        assert_eq!(list_ids(&json!([1, "x"])), Some(ids(&["1", "x"])));
        assert_eq!(
            list_ids(&json!({"page": {"items": [{"id": 3}]}})),
            Some(ids(&["3"]))
        );
        assert_eq!(list_ids(&json!({"n": 1})), None);
    }

    #[test]
    fn counts_added_ids() {
        let added = added(&ids(&["a"]), &ids(&["a", "b", "c"]));
        assert_eq!(added, ["b", "c"]);
        assert_eq!(
            describe_added(Some(&added[..1]), 1),
            Ok("list +1".to_owned())
        );
        assert!(
            describe_added(Some(&added), 1)
                .unwrap_err()
                .contains("list +2 (b, c)")
        );
        assert!(describe_added(None, 1).is_ok());
    }
}
