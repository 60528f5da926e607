//! `Retry-After` (RFC 9110 §10.2.3), in both its forms.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::RETRY_AFTER;

/// How long the server asks to wait: delta-seconds or an HTTP-date (a date in the past means
/// now); `None` when the header is absent or neither form.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Too many digits for a u64 is "a very long time": the cap decides.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, value.parse().unwrap());
        headers
    }

    #[test]
    fn delta_seconds() {
        let now = SystemTime::now();
        assert_eq!(
            retry_after(&headers("3"), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(retry_after(&headers(" 0 "), now), Some(Duration::ZERO));
        let huge = retry_after(&headers("99999999999999999999999"), now);
        assert_eq!(huge, Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn an_http_date_is_the_time_until_it() {
        let now = httpdate::parse_http_date("Wed, 02 Dec 2026 10:00:00 GMT").unwrap();
        let later = headers("Wed, 02 Dec 2026 10:00:07 GMT");
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(7)));
        let past = headers("Wed, 02 Dec 2026 09:00:00 GMT");
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_no_request_to_wait() {
        let now = SystemTime::now();
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
        for bad in ["-1", "1.5", "soon", "", "Wed, 02 Dec 2026"] {
            assert_eq!(retry_after(&headers(bad), now), None, "{bad:?}");
        }
    }
}
