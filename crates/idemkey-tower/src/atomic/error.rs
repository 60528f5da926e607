//! [`DbError`]: a handler's database error, which the layer reads to run the handler again.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use sqlx::error::DatabaseError;

use crate::answer::handler_failed;
use crate::problem_response;

/// A database error a handler reports, so that the layer can tell a serialization failure or
/// a deadlock (after which it runs the handler again, in a new transaction, at most three
/// times) from other failures.
///
/// As a response it is 500 `handler-failed`: the transaction rolled back, nothing was
/// stored, and a retry with the same key is safe. A handler with an error type of its own
/// keeps the re-run by [attaching](Self::attach) the error to its own response, and can
/// answer a business status on a constraint violation ([`Self::is_unique_violation`],
/// [`Self::constraint`], [`Self::database_error`]): see [`super`].
#[derive(Clone, Debug)]
pub struct DbError(pub Arc<sqlx::Error>);

impl DbError {
    /// The error the database itself returned (its code, `kind()`, `constraint()`,
    /// `table()`); `None` for a failure around it (I/O, the pool, decoding).
    pub fn database_error(&self) -> Option<&dyn DatabaseError> {
        self.0.as_database_error()
    }

    /// Whether the database refused a write for a unique or primary key constraint.
    pub fn is_unique_violation(&self) -> bool {
        self.database_error()
            .is_some_and(|error| error.is_unique_violation())
    }

    /// The name of the constraint the database reported, if any.
    pub fn constraint(&self) -> Option<&str> {
        self.database_error()?.constraint()
    }

    /// Attaches the error to `response`, whatever its status: the layer then runs the
    /// handler again if the error is a serialization failure or a deadlock, and otherwise
    /// answers `response` as it would without it.
    pub fn attach<B>(self, response: &mut http::Response<B>) {
        response.extensions_mut().insert(self);
    }
}

impl From<sqlx::Error> for DbError {
    fn from(error: sqlx::Error) -> Self {
        Self(Arc::new(error))
    }
}

impl IntoResponse for DbError {
    fn into_response(self) -> Response {
        tracing::error!(error = %self.0, "database error in a handler; its transaction rolls back");
        let mut response = problem_response(&handler_failed());
        self.attach(&mut response);
        response
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The layer's own answer is a catalogued problem, and carries the error for the re-run.
    #[tokio::test]
    async fn a_db_error_answers_handler_failed_with_itself_attached() {
        let error = DbError::from(sqlx::Error::RowNotFound);
        assert!(!error.is_unique_violation());
        assert_eq!(error.constraint(), None);
        let response = error.into_response();
        assert_eq!(response.status(), 500);
        assert!(response.extensions().get::<DbError>().is_some());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        let problem: serde_json::Value = serde_json::from_slice(&body.unwrap()).unwrap();
        let type_uri = problem["type"].as_str().unwrap();
        assert!(type_uri.ends_with("#handler-failed"), "{type_uri}");
    }
}
