//! What a handler takes from the layer through actix's extractors: the request's
//! transaction ([`Tx`], feature `sqlx`), its derived keys ([`Keys`]), and whether the layer
//! recorded it ([`claim`]).

use std::ops::Deref;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use futures_util::future::{Ready, ready};
use idemkey_core::Claim;

/// The extensions the layer gave the request it handed the handler (its claim, keys and
/// transaction), carried into actix's.
pub(crate) struct Carried(pub(crate) http::Extensions);

/// A value the layer put in the request's extensions.
fn carried<T: Clone + Send + Sync + 'static>(request: &HttpRequest) -> Option<T> {
    request.extensions().get::<Carried>()?.0.get::<T>().cloned()
}

/// The claim of a request the layer recorded (a keyed one); `None` for a request it let
/// through unrecorded (no key, where the key is optional, or a method it does not cover).
pub fn claim(request: &HttpRequest) -> Option<Claim> {
    carried(request)
}

/// The derived keys of the request's record (behaviour §8a): the key each external call
/// carries, the same on every execution of the record. Refused (500) on a request the layer
/// did not record: take `Option<Keys>` where the key is optional.
#[derive(Clone, Debug)]
pub struct Keys(pub idemkey_tower::Keys);

impl Deref for Keys {
    type Target = idemkey_tower::Keys;

    fn deref(&self) -> &idemkey_tower::Keys {
        &self.0
    }
}

impl FromRequest for Keys {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, actix_web::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let keys = request
            .extensions()
            .get::<Carried>()
            .and_then(|carried| idemkey_tower::Keys::from_extensions(&carried.0));
        ready(keys.map(Self).ok_or_else(|| {
            actix_web::error::ErrorInternalServerError(
                "the handler takes Keys, but the idempotency middleware did not record this \
                 request",
            )
        }))
    }
}

#[cfg(feature = "sqlx")]
pub use tx::Tx;

#[cfg(feature = "sqlx")]
mod tx {
    use std::ops::{Deref, DerefMut};

    use actix_web::dev::Payload;
    use actix_web::{FromRequest, HttpMessage, HttpRequest};
    use futures_util::future::LocalBoxFuture;
    use idemkey_sqlx::Backend;

    use super::Carried;
    use crate::convert;

    /// The request's transaction: the handler writes on it, and the middleware stores the
    /// response in it and commits once the handler has answered. axum's `Tx`
    /// (`idemkey_tower::atomic::Tx`) for actix-web, with the same rules: in atomic mode the
    /// claim is already made in it; in lease mode with `IdempotencyLayer::transactional` it
    /// begins when taken and the record's completion is its last statement.
    ///
    /// Dereferences to the connection: `query.execute(&mut *tx)`. Refused with the layer's
    /// problem (500 `no-transaction`, or 503 when none can begin) when the route offers none.
    pub struct Tx<DB: Backend>(idemkey_tower::atomic::Tx<DB>);

    impl<DB: Backend> Deref for Tx<DB> {
        type Target = DB::Connection;

        fn deref(&self) -> &DB::Connection {
            &self.0
        }
    }

    impl<DB: Backend> DerefMut for Tx<DB> {
        fn deref_mut(&mut self) -> &mut DB::Connection {
            &mut self.0
        }
    }

    impl<DB: Backend> FromRequest for Tx<DB> {
        type Error = actix_web::Error;
        type Future = LocalBoxFuture<'static, Result<Self, actix_web::Error>>;

        fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
            let taken = match request.extensions().get::<Carried>() {
                Some(carried) => idemkey_tower::atomic::Tx::<DB>::from_extensions(&carried.0),
                None => idemkey_tower::atomic::Tx::<DB>::from_extensions(&http::Extensions::new()),
            };
            Box::pin(async move {
                match taken.await {
                    Ok(tx) => Ok(Self(tx)),
                    Err(problem) => {
                        let response = convert::actix_response(problem).await;
                        let error = "the request's transaction could not be taken";
                        Err(actix_web::error::InternalError::from_response(error, response).into())
                    }
                }
            })
        }
    }
}
