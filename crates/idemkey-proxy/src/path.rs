//! A request's path, normalised (RFC 3986 §6.2.2) before any route sees it, so that one
//! resource has one spelling: for route matching, for the record's operation and
//! fingerprint, and for the upstream. What cannot be normalised safely is refused.

/// Why a path is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadPath {
    /// Not an absolute path (`*`, or none).
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// An encoded `/`, `\` or NUL, or a `\` or `;`: servers split or cut segments on them,
    /// each in its own way, so no spelling of the path is the upstream's.
    Ambiguous,
    /// More `..` segments than segments before them.
    AboveRoot,
}

impl BadPath {
    /// What the client is told.
    pub(crate) fn detail(self) -> &'static str {
        match self {
            Self::NotAbsolute => "the path must start with '/'",
            Self::BadEscape => "a '%' in the path is not followed by two hex digits",
            Self::Ambiguous => {
                "the path has an encoded '/', '\\' or NUL, or a '\\' or ';', which cannot be \
                 normalised safely"
            }
            Self::AboveRoot => "the path climbs above the root with '..'",
        }
    }
}

/// `path` normalised: percent-encoded unreserved characters decoded and other escapes in
/// upper case, `.` and `..` segments removed (RFC 3986 §5.2.4), and runs of `/` collapsed
/// into one (empty segments name nothing most servers tell apart). A trailing `/` is kept.
pub(crate) fn normalise(path: &str) -> Result<String, BadPath> {
    let rest = path.strip_prefix('/').ok_or(BadPath::NotAbsolute)?;
    let mut kept: Vec<String> = Vec::new();
    let mut trailing = false;
    for segment in rest.split('/') {
        let segment = decode_unreserved(segment)?;
        trailing = matches!(segment.as_str(), "" | "." | "..");
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                kept.pop().ok_or(BadPath::AboveRoot)?;
            }
            _ => kept.push(segment),
        }
    }
    let mut normal = format!("/{}", kept.join("/"));
    if trailing && !kept.is_empty() {
        normal.push('/');
    }
    Ok(normal)
}

/// One segment with its percent-encoded unreserved characters decoded (RFC 3986 §2.3) and
/// every other escape in upper case (§6.2.2.1).
fn decode_unreserved(segment: &str) -> Result<String, BadPath> {
    let bytes = segment.as_bytes();
    let mut decoded = String::with_capacity(segment.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let byte = bytes
                    .get(at + 1..at + 3)
                    .and_then(|hex| std::str::from_utf8(hex).ok())
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or(BadPath::BadEscape)?;
                match byte {
                    b'/' | b'\\' | 0 => return Err(BadPath::Ambiguous),
                    b if unreserved(b) => decoded.push(char::from(b)),
                    b => decoded.push_str(&format!("%{b:02X}")),
                }
                at += 3;
            }
            b'\\' | b';' => return Err(BadPath::Ambiguous),
            _ => {
                // Not a '%': copied up to the next one, whole characters at a time.
                let end = bytes[at..]
                    .iter()
                    .position(|&b| matches!(b, b'%' | b'\\' | b';'))
                    .map_or(bytes.len(), |n| at + n);
                decoded.push_str(&segment[at..end]);
                at = end;
            }
        }
    }
    Ok(decoded)
}

fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised() {
        for (path, normal) in [
            ("/", "/"),
            ("//", "/"),
            ("/a//b", "/a/b"),
            ("/a/b/", "/a/b/"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/../../c", "/c"),
            ("/a/%2e%2E/b", "/b"),
            ("/a/.%2e/b", "/b"),
            ("/%70a%7E", "/pa~"),
            ("/%c3%a9", "/%C3%A9"),
            ("/é", "/é"),
            ("/a/%20b", "/a/%20b"),
        ] {
            assert_eq!(normalise(path).as_deref(), Ok(normal), "{path}");
        }
    }

    #[test]
    fn what_cannot_be_normalised_safely_is_refused() {
        for (path, why) in [
            ("*", BadPath::NotAbsolute),
            ("/..", BadPath::AboveRoot),
            ("/a/../..", BadPath::AboveRoot),
            ("/%2e%2e/a", BadPath::AboveRoot),
            ("/a%2fb", BadPath::Ambiguous),
            ("/a%5Cb", BadPath::Ambiguous),
            ("/a\\b", BadPath::Ambiguous),
            ("/a%00", BadPath::Ambiguous),
            ("/a;b=c/d", BadPath::Ambiguous),
            ("/a%2", BadPath::BadEscape),
            ("/a%zz", BadPath::BadEscape),
        ] {
            assert_eq!(normalise(path), Err(why), "{path}");
        }
    }
}
