//! idemkey's problem responses as actix responses, for an application's own problems.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use idemkey_core::Problem;

/// `problem` as an `application/problem+json` response, with the headers it carries
/// (`Retry-After`, `Cache-Control: no-store`): what the axum layer's
/// `idemkey_tower::problem_response` answers, byte for byte.
pub fn problem_response(problem: &Problem) -> HttpResponse {
    let stored = problem.to_stored();
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    for (name, value) in &stored.headers {
        response.append_header((name.as_str(), value.as_ref()));
    }
    response.body(stored.body)
}
