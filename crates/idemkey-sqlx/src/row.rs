//! Decoding a stored row into a core [`Record`], shared by both backends.

use std::time::Duration;

use bytes::Bytes;
use idemkey_core::{Error, Fingerprint, Record, RecordId, RecordState, Result, StoredResponse};

/// State codes stored in the `state` column.
pub(crate) const IN_FLIGHT: i16 = 0;
pub(crate) const RELEASED: i16 = 1;
pub(crate) const COMPLETED: i16 = 2;

/// The columns every record query selects, in this order.
pub(crate) type RecordRow = (
    Vec<u8>,         // record_id
    String,          // version
    Vec<u8>,         // fingerprint
    i16,             // state
    i64,             // token
    i64,             // lease remaining, ms (0 once expired)
    Option<String>,  // request_id
    Option<Vec<u8>>, // response
);

fn corrupt(what: &'static str) -> Error {
    Error::Backend(format!("stored record is corrupt: {what}").into())
}

/// Builds the core record from a row.
pub(crate) fn into_record(row: RecordRow) -> Result<Record> {
    let (record_id, version, fingerprint, state, token, lease_ms, request_id, response) = row;
    let state = match (state, response) {
        (IN_FLIGHT, _) => RecordState::InFlight {
            lease_remaining: Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0)),
        },
        (RELEASED, _) => RecordState::Released,
        (COMPLETED, Some(bytes)) => {
            RecordState::Completed(StoredResponse::decode(Bytes::from(bytes))?)
        }
        _ => return Err(corrupt("state")),
    };
    Ok(Record {
        record_id: RecordId::from_slice(&record_id).ok_or_else(|| corrupt("record id"))?,
        version,
        fingerprint: Fingerprint::from_slice(&fingerprint).ok_or_else(|| corrupt("fingerprint"))?,
        token,
        state,
        request_id,
    })
}

/// A fenced statement must change exactly the one row the claim holds.
pub(crate) fn fenced(rows: u64) -> Result<()> {
    if rows == 1 {
        Ok(())
    } else {
        Err(Error::Fenced)
    }
}
