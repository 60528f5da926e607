//! Finding the actor of a request (behaviour [§3](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#3-scope)).

use http::request::Parts;

use crate::Actor;

/// Finds the authenticated actor of a request: part of the scope, so keys are never shared
/// between actors. `None` answers 401 `unauthenticated`.
///
/// Implemented by [`ActorExtension`] (the default: the [`Actor`] that authentication put in the
/// request extensions) and by every `Fn(&Parts) -> Option<String>` closure, so an application
/// can read its own extension type:
///
/// ```
/// use http::request::Parts;
/// use idemkey_tower::Config; // `idemkey::Config` with the facade
///
/// #[derive(Clone)]
/// struct User {
///     tenant: String,
/// }
///
/// let config = Config::default()
///     .actor(|parts: &Parts| parts.extensions.get::<User>().map(|u| u.tenant.clone()));
/// ```
pub trait MakeActor: Send + Sync + 'static {
    /// The actor of the request with these parts, if it is authenticated.
    fn make_actor(&self, parts: &Parts) -> Option<String>;
}

impl<F> MakeActor for F
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn make_actor(&self, parts: &Parts) -> Option<String> {
        self(parts)
    }
}

/// The default [`MakeActor`]: the [`Actor`] in the request extensions.
#[derive(Clone, Copy, Debug, Default)]
pub struct ActorExtension;

impl MakeActor for ActorExtension {
    fn make_actor(&self, parts: &Parts) -> Option<String> {
        parts.extensions.get::<Actor>().map(|actor| actor.0.clone())
    }
}
