//! [`Exchange`]: one response as the checker saw it, and the helpers cases compare them with.

use http::HeaderMap;
use serde_json::Value;

/// Longest body excerpt quoted in evidence.
const EXCERPT: usize = 80;

/// One HTTP response: status, headers and the full body bytes.
#[derive(Debug, Clone)]
pub(crate) struct Exchange {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Exchange {
    /// Whether the status is 2xx.
    pub(crate) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name`, if it is text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON, if it is JSON.
    pub(crate) fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether the response says it is a replay (`Idempotent-Replayed: true`).
    pub(crate) fn marked_replayed(&self) -> bool {
        self.header("idempotent-replayed")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// The resource this response names: an `id` field of a JSON object body, else `Location`.
    pub(crate) fn resource(&self) -> Option<String> {
        let id = self
            .json()
            .and_then(|body| body.get("id").and_then(id_text));
        id.or_else(|| self.header("location").map(str::to_owned))
    }

    /// Same body: equal JSON values when both parse, else equal bytes.
    pub(crate) fn same_body(&self, other: &Exchange) -> bool {
        match (self.json(), other.json()) {
            (Some(a), Some(b)) => a == b,
            _ => self.body == other.body,
        }
    }

    /// `201 {"id":"…"…}`: the status and a one-line excerpt of the body.
    pub(crate) fn summary(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if flat.is_empty() {
            return self.status.to_string();
        }
        let mut excerpt: String = flat.chars().take(EXCERPT).collect();
        if flat.chars().count() > EXCERPT {
            excerpt.push('…');
        }
        format!("{} {excerpt}", self.status)
    }
}

/// The text of an id value: strings as they are, numbers in decimal.
pub(crate) fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn exchange(body: &str) -> Exchange {
        Exchange {
            status: 201,
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn resource_prefers_the_id_then_location() {
        assert_eq!(exchange(r#"{"id":"n1"}"#).resource().as_deref(), Some("n1"));
        assert_eq!(exchange(r#"{"id":7}"#).resource().as_deref(), Some("7"));
        let mut located = exchange("created");
        located
            .headers
            .insert("location", HeaderValue::from_static("/v1/notes/9"));
        assert_eq!(located.resource().as_deref(), Some("/v1/notes/9"));
        assert_eq!(exchange("{}").resource(), None);
    }

    #[test]
    fn bodies_compare_as_json_when_possible() {
        assert!(exchange(r#"{"a":1,"b":2}"#).same_body(&exchange(r#"{ "b":2, "a":1 }"#)));
        assert!(!exchange("x").same_body(&exchange("y")));
    }

    #[test]
    fn summary_is_one_short_line() {
        let long = format!("{{\n\"t\": \"{}\"}}", "x".repeat(200));
        let summary = exchange(&long).summary();
        assert!(summary.starts_with("201 { \"t\""));
        assert!(!summary.contains('\n'));
        assert!(summary.chars().count() < 100);
    }
}
