//! Which responses are stored: the application's policy, and the marks a handler can put on
//! one response (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored)).

use http::response::Parts;
use idemkey_core::{StatusPolicy, Verdict};

use crate::NotExecuted;

/// Decides, per response, whether it is stored, released or rejected (see [`Verdict`]).
///
/// Implemented by [`StatusPolicy`] (the default: [`StatusPolicy::Default`]) and by every
/// `Fn(&Parts) -> Verdict` closure, so the application can decide from the status, the
/// headers or the response's extensions:
///
/// ```
/// use http::response::Parts;
/// // With the facade: `use idemkey::{Config, StatusPolicy, Verdict};`
/// use idemkey_core::{StatusPolicy, Verdict};
/// use idemkey_tower::Config;
///
/// // Store what the default stores, and also 503s that carry a business answer.
/// let config = Config::default().status_policy(|response: &Parts| {
///     match response.headers.get("x-business-outcome") {
///         Some(_) => Verdict::Store,
///         None => StatusPolicy::Default.verdict(response.status.as_u16()),
///     }
/// });
/// ```
///
/// A handler's own mark goes first, whatever the policy: a [`Verdict`] in the response's
/// extensions, or [`NotExecuted`] (the same as [`Verdict::Reject`]).
pub trait ResponsePolicy: Send + Sync + 'static {
    /// What becomes of the claim of a request answered with this response head.
    fn verdict(&self, response: &Parts) -> Verdict;
}

impl ResponsePolicy for StatusPolicy {
    fn verdict(&self, response: &Parts) -> Verdict {
        StatusPolicy::verdict(*self, response.status.as_u16())
    }
}

impl<F> ResponsePolicy for F
where
    F: Fn(&Parts) -> Verdict + Send + Sync + 'static,
{
    fn verdict(&self, response: &Parts) -> Verdict {
        self(response)
    }
}

/// The verdict on `response`, handed back with it.
pub(crate) fn judge<B>(
    policy: &dyn ResponsePolicy,
    response: http::Response<B>,
) -> (Verdict, http::Response<B>) {
    // The policy reads a head (`Parts`); an `http::Response` lends none, so it is taken
    // apart and put back together, which moves no header or body.
    let (parts, body) = response.into_parts();
    let verdict = verdict(policy, &parts);
    (verdict, http::Response::from_parts(parts, body))
}

/// The verdict on a response: the handler's mark if it made one, else the policy's.
fn verdict(policy: &dyn ResponsePolicy, response: &Parts) -> Verdict {
    if let Some(verdict) = response.extensions.get::<Verdict>() {
        return *verdict;
    }
    if response.extensions.get::<NotExecuted>().is_some() {
        return Verdict::Reject;
    }
    policy.verdict(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16) -> Parts {
        let response = http::Response::builder().status(status).body(()).unwrap();
        response.into_parts().0
    }

    #[test]
    fn marks_go_before_the_policy() {
        let policy = StatusPolicy::Default;
        assert_eq!(verdict(&policy, &head(201)), Verdict::Store);
        assert_eq!(verdict(&policy, &head(422)), Verdict::Reject);
        let mut marked = head(404);
        marked.extensions.insert(Verdict::Store);
        assert_eq!(verdict(&policy, &marked), Verdict::Store);
        let mut not_executed = head(201);
        not_executed.extensions.insert(NotExecuted);
        assert_eq!(verdict(&policy, &not_executed), Verdict::Reject);
    }

    #[test]
    fn closures_are_policies() {
        let policy = |_: &Parts| Verdict::Release;
        assert_eq!(verdict(&policy, &head(201)), Verdict::Release);
    }
}
