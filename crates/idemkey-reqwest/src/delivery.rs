//! What the caller learns of how an answer came: the response's [`Delivery`] extension.

/// How an answer was obtained: in the response's extensions
/// (`response.extensions().get::<Delivery>()`) of every request the middleware handled.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Delivery {
    /// The `Idempotency-Key` every attempt carried, unquoted when it was in the draft's
    /// quoted form; `None` for a request without one.
    pub key: Option<String>,
    /// Attempts made, this answer's included.
    pub attempts: u32,
    /// The answer carries `Idempotent-Replayed: true`: the server replayed the answer it
    /// stored for this key (an earlier attempt executed the request).
    pub replayed: bool,
}
