//! Mapping sqlx errors onto idemkey's error.

use idemkey_core::Error;

/// Classifies a sqlx error: waits that ran out are `Unavailable`, the rest `Backend`.
pub(crate) fn store_error(error: sqlx::Error) -> Error {
    if is_unavailable(&error) {
        Error::Unavailable(Box::new(error))
    } else {
        Error::Backend(Box::new(error))
    }
}

fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| is_wait_code(&code)),
        _ => false,
    }
}

/// SQLite busy or locked (any extended code), or PostgreSQL lock_not_available (55P03).
fn is_wait_code(code: &str) -> bool {
    if code == "55P03" {
        return true;
    }
    code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
}

/// Milliseconds for SQL arithmetic, saturating.
pub(crate) fn millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_codes() {
        assert!(is_wait_code("5") && is_wait_code("517") && is_wait_code("6"));
        assert!(is_wait_code("55P03"));
        assert!(!is_wait_code("19") && !is_wait_code("23505"));
    }
}
