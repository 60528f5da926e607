//! The media type as the fingerprint counts it (behaviour [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)): the essence, lower-cased, and
//! its parameters, which can change what the same bytes mean (a `charset` of a text body, a
//! multipart `boundary`).

/// The essence (`type/subtype`, lower-cased) and the parameters in a canonical form:
/// `;name="value"` for each, names lower-cased, sorted by name then value, values unquoted
/// and written back as quoted strings (so the form is unambiguous), a `charset` value
/// lower-cased (it is case-insensitive). `charset=utf-8` of a JSON media type is left out:
/// JSON is UTF-8 by definition, so it changes nothing.
pub(crate) fn canonical(value: &str) -> (String, String) {
    let mut parts = split_unquoted(value);
    let essence = parts.remove(0).trim().to_ascii_lowercase();
    let mut params: Vec<(String, String)> = parts
        .iter()
        .filter_map(|part| parameter(part))
        .filter(|(name, value)| !(super::is_json_media_type(&essence) && is_utf8(name, value)))
        .collect();
    params.sort();
    let mut form = essence.clone();
    for (name, value) in params {
        form.push(';');
        form.push_str(&name);
        form.push_str("=\"");
        form.push_str(&value.replace('\\', "\\\\").replace('"', "\\\""));
        form.push('"');
    }
    (essence, form)
}

fn is_utf8(name: &str, value: &str) -> bool {
    name == "charset" && (value == "utf-8" || value == "utf8")
}

/// `name=value` with the value unquoted; `None` for an empty or malformed parameter.
fn parameter(part: &str) -> Option<(String, String)> {
    let (name, value) = part.split_once('=')?;
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return None;
    }
    let value = unquote(value.trim());
    let value = if name == "charset" {
        value.to_ascii_lowercase()
    } else {
        value
    };
    Some((name, value))
}

/// A quoted string's content with its escapes resolved; a token as it is.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"') else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => break,
            c => out.push(c),
        }
    }
    out
}

/// Splits at the semicolons outside quoted strings.
fn split_unquoted(value: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn parameters_are_canonical() {
        assert_eq!(canonical("Text/Plain").1, "text/plain");
        assert_eq!(canonical("").1, "");
        assert_eq!(
            canonical("text/plain; Charset=\"UTF-8\"").1,
            "text/plain;charset=\"utf-8\""
        );
        assert_eq!(
            canonical("multipart/form-data; b=2; a=\"x;y\\\"z\"").1,
            "multipart/form-data;a=\"x;y\\\"z\";b=\"2\""
        );
        // JSON is UTF-8 whatever the label says; other parameters still count.
        assert_eq!(
            canonical("application/json; charset=utf-8").1,
            "application/json"
        );
        assert_eq!(
            canonical("application/json;charset=utf-16").1,
            "application/json;charset=\"utf-16\""
        );
    }

    #[test]
    fn a_quoted_semicolon_is_not_a_separator() {
        assert_ne!(
            canonical("multipart/form-data; boundary=\"a;b=c\"").1,
            canonical("multipart/form-data; boundary=a; b=c").1
        );
    }
}
