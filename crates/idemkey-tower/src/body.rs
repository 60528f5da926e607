//! [`Body`]: the body of the requests the layer hands the inner service and of its
//! responses.
//!
//! With the `axum` feature it is axum's own body, so that the layer's responses are axum
//! responses and a router's services take its requests as they are. Without it, it is a
//! boxed `http` body with the same constructors (`new`, `empty`, `From<Bytes>`,
//! `From<String>`, ...), so that code written against either builds against both.

#[cfg(feature = "axum")]
pub use axum::body::Body;

#[cfg(not(feature = "axum"))]
pub use plain::Body;

#[cfg(not(feature = "axum"))]
mod plain {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body::{Frame, SizeHint};
    use http_body_util::combinators::UnsyncBoxBody;
    use http_body_util::{BodyExt, Empty, Full};
    use idemkey_core::BoxError;

    /// A boxed `http` body of [`Bytes`], as axum's `Body` is.
    #[derive(Debug)]
    pub struct Body(UnsyncBoxBody<Bytes, BoxError>);

    impl Body {
        /// Boxes `body`.
        pub fn new<B>(body: B) -> Self
        where
            B: http_body::Body<Data = Bytes> + Send + 'static,
            B::Error: Into<BoxError>,
        {
            Self(body.map_err(Into::into).boxed_unsync())
        }

        /// An empty body.
        pub fn empty() -> Self {
            Self::new(Empty::new())
        }
    }

    impl Default for Body {
        fn default() -> Self {
            Self::empty()
        }
    }

    impl From<Bytes> for Body {
        fn from(bytes: Bytes) -> Self {
            Self::new(Full::new(bytes))
        }
    }

    impl From<String> for Body {
        fn from(text: String) -> Self {
            Self::from(Bytes::from(text))
        }
    }

    impl From<&'static str> for Body {
        fn from(text: &'static str) -> Self {
            Self::from(Bytes::from_static(text.as_bytes()))
        }
    }

    impl From<Vec<u8>> for Body {
        fn from(bytes: Vec<u8>) -> Self {
            Self::from(Bytes::from(bytes))
        }
    }

    impl http_body::Body for Body {
        type Data = Bytes;
        type Error = BoxError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Pin::new(&mut self.0).poll_frame(cx)
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_end_stream()
        }

        fn size_hint(&self) -> SizeHint {
            self.0.size_hint()
        }
    }
}
