//! Bounds on what a server can make the checker hold in memory.

/// Largest response body the checker reads, in bytes: 16 MiB.
///
/// The checker talks to servers it cannot trust. Without a bound, a server that streams a body
/// forever fills the checker's memory before the request timeout ends the read (over loopback,
/// gigabytes arrive within the default 10 s). The responses a check reads — a created resource,
/// a problem document, one page of the list endpoint — are orders of magnitude smaller, so a
/// body past this size fails its case with an error naming the limit, on both HTTP paths (the
/// HTTP client and the raw HTTP/1.1 reader).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The error text for a body past [`MAX_BODY_BYTES`], the same on both HTTP paths.
pub(crate) fn body_too_large() -> String {
    format!(
        "response body exceeds the {} MiB limit",
        MAX_BODY_BYTES / (1024 * 1024)
    )
}
