//! The handler's transaction, which both modes offer it: the [`Tx`] extractor (`extractor`),
//! the slot it is taken from and given back to (`slot`), and lease mode's completion in it:
//! the seam the lease steps see (`offered`, with any store) and its side on a sqlx store
//! (`lease`, [`IdempotencyLayer::transactional`](crate::IdempotencyLayer::transactional)).

#[cfg(feature = "sqlx")]
mod extractor;
#[cfg(feature = "sqlx")]
mod lease;
mod offered;
#[cfg(feature = "sqlx")]
mod slot;

#[cfg(feature = "sqlx")]
pub use extractor::Tx;
pub(crate) use offered::{MaybeTransactions, Offered};
#[cfg(feature = "sqlx")]
pub(crate) use slot::{TxOffer, TxSlot, end};
