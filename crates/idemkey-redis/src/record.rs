//! Script replies ↔ core types: the record array of `lua/common.lua`'s `reply`, tokens, flags.

use std::time::Duration;

use bytes::Bytes;
use idemkey_core::{Error, Fingerprint, Record, RecordId, RecordState, Result, StoredResponse};
use redis::Value;

/// State codes stored in the hash's `st` field.
const IN_FLIGHT: i64 = 0;
const RELEASED: i64 = 1;
const COMPLETED: i64 = 2;
/// Not stored: a completion whose wait for replicas or an fsync may still run, as `reply`
/// reports it. Read as in flight for the wait's time left, so that no replay answers from it
/// before it is as durable as asked.
const WAITING: i64 = 3;

/// What `claim.lua` answered.
pub(crate) enum Claimed {
    /// The scope was claimed under this token.
    Token(i64),
    /// A live record exists.
    Existing(Record),
    /// Nothing was created: the actor's caps refuse a new record at this usage.
    Refused(idemkey_core::ActorUsage),
}

fn corrupt(what: &str) -> Error {
    Error::Backend(format!("unexpected reply or stored record from Redis: {what}").into())
}

fn int(value: &Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(*n),
        _ => Err(corrupt("an integer expected")),
    }
}

fn bytes(value: Value, what: &str) -> Result<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        _ => Err(corrupt(what)),
    }
}

/// A script's `false` (an absent field): a RESP2 nil, or a boolean on a RESP3 connection.
fn absent(value: &Value) -> bool {
    matches!(value, Value::Nil | Value::Boolean(false))
}

fn optional_bytes(value: Value, what: &str) -> Result<Option<Vec<u8>>> {
    match value {
        v if absent(&v) => Ok(None),
        other => bytes(other, what).map(Some),
    }
}

fn text(value: Value, what: &str) -> Result<String> {
    String::from_utf8(bytes(value, what)?).map_err(|_| corrupt(what))
}

/// The live record of `lookup.lua`, or `None` for its nil.
pub(crate) fn optional_record(value: Value) -> Result<Option<Record>> {
    match value {
        v if absent(&v) => Ok(None),
        other => record(other).map(Some),
    }
}

/// The record array: id, version, fingerprint, state, token, lease left (ms), request id or
/// nil, response or nil.
pub(crate) fn record(value: Value) -> Result<Record> {
    let Value::Array(fields) = value else {
        return Err(corrupt("a record array expected"));
    };
    let Ok(
        [
            id,
            version,
            fingerprint,
            state,
            token,
            lease,
            request_id,
            response,
        ],
    ) = <[Value; 8]>::try_from(fields)
    else {
        return Err(corrupt("a record of 8 fields expected"));
    };
    let state = match (int(&state)?, optional_bytes(response, "response")?) {
        (IN_FLIGHT, _) | (WAITING, Some(_)) => RecordState::InFlight {
            lease_remaining: Duration::from_millis(u64::try_from(int(&lease)?).unwrap_or(0)),
        },
        (RELEASED, _) => RecordState::Released,
        (COMPLETED, Some(bytes)) => {
            RecordState::Completed(StoredResponse::decode(Bytes::from(bytes))?)
        }
        _ => return Err(corrupt("state")),
    };
    Ok(Record {
        record_id: RecordId::from_slice(&bytes(id, "record id")?)
            .ok_or_else(|| corrupt("record id"))?,
        version: text(version, "version")?,
        fingerprint: Fingerprint::from_slice(&bytes(fingerprint, "fingerprint")?)
            .ok_or_else(|| corrupt("fingerprint"))?,
        token: int(&token)?,
        state,
        request_id: optional_bytes(request_id, "request id")?
            .map(|id| String::from_utf8(id).map_err(|_| corrupt("request id")))
            .transpose()?,
    })
}

/// `claim.lua`'s `{1, token}`, `{0, record}` or the caps' refusal `{2, …}`.
pub(crate) fn claimed(value: Value) -> Result<Claimed> {
    let Value::Array(parts) = value else {
        return Err(corrupt("a claim reply expected"));
    };
    if matches!(parts.first(), Some(Value::Int(2))) {
        return crate::caps::refused(Value::Array(parts)).map(Claimed::Refused);
    }
    let Ok([tag, rest]) = <[Value; 2]>::try_from(parts) else {
        return Err(corrupt("a claim reply of 2 parts expected"));
    };
    match int(&tag)? {
        1 => Ok(Claimed::Token(int(&rest)?)),
        0 => record(rest).map(Claimed::Existing),
        _ => Err(corrupt("claim reply tag")),
    }
}

/// `cached.lua`'s `{record, ms left}`, or `None` for its nil.
pub(crate) fn cached(value: Value) -> Result<Option<(Record, Duration)>> {
    let parts = match value {
        v if absent(&v) => return Ok(None),
        Value::Array(parts) => parts,
        _ => return Err(corrupt("a cached record reply expected")),
    };
    let Ok([found, left]) = <[Value; 2]>::try_from(parts) else {
        return Err(corrupt("a cached record reply of 2 parts expected"));
    };
    let left = Duration::from_millis(u64::try_from(int(&left)?).unwrap_or(0));
    Ok(Some((record(found)?, left)))
}

/// `reclaim.lua`'s new token, or `None` for its nil.
pub(crate) fn token(value: &Value) -> Result<Option<i64>> {
    match value {
        v if absent(v) => Ok(None),
        other => int(other).map(Some),
    }
}

/// A fenced script's 1 (done) or 0 (fenced, or nothing there).
pub(crate) fn done(value: &Value) -> Result<bool> {
    match int(value)? {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(corrupt("a 0 or 1 expected")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn reply(state: i64, response: Value) -> Value {
        let fingerprint = Fingerprint::builder("POST", "/").body(b"");
        Value::Array(vec![
            Value::BulkString(RecordId::new().as_bytes().to_vec()),
            Value::BulkString(b"v1".to_vec()),
            Value::BulkString(fingerprint.as_bytes().to_vec()),
            Value::Int(state),
            Value::Int(3),
            Value::Int(1500),
            Value::Nil,
            response,
        ])
    }

    #[test]
    fn records_decode_in_each_state() {
        let flight = record(reply(IN_FLIGHT, Value::Nil)).unwrap();
        assert_eq!(
            flight.state,
            RecordState::InFlight {
                lease_remaining: Duration::from_millis(1500)
            }
        );
        assert_eq!((flight.token, flight.request_id), (3, None));
        let stored = StoredResponse::new(201, "x");
        let done = record(reply(COMPLETED, Value::BulkString(stored.encode()))).unwrap();
        assert_eq!(done.state, RecordState::Completed(stored.clone()));
        let waiting = record(reply(WAITING, Value::BulkString(stored.encode()))).unwrap();
        assert_eq!(
            waiting.state,
            RecordState::InFlight {
                lease_remaining: Duration::from_millis(1500)
            },
            "a completion whose wait may still run is not answered from"
        );
    }

    #[test]
    fn cached_replies_carry_the_time_left() {
        let stored = StoredResponse::new(201, "x");
        let found = reply(COMPLETED, Value::BulkString(stored.encode()));
        let (done, left) = cached(Value::Array(vec![found, Value::Int(2500)]))
            .unwrap()
            .unwrap();
        assert_eq!(done.state, RecordState::Completed(stored));
        assert_eq!(left, Duration::from_millis(2500));
        assert!(cached(Value::Boolean(false)).unwrap().is_none());
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(record(reply(COMPLETED, Value::Nil)).is_err());
        assert!(record(reply(7, Value::Nil)).is_err());
        assert!(record(reply(COMPLETED, Value::BulkString(b"junk".to_vec()))).is_err());
        assert!(record(Value::Array(vec![Value::Nil])).is_err());
        assert!(record(Value::Int(1)).is_err());
        assert!(claimed(Value::Array(vec![Value::Int(5), Value::Nil])).is_err());
        assert!(done(&Value::Int(2)).is_err());
        assert!(token(&Value::BulkString(vec![])).is_err());
        assert!(cached(Value::Array(vec![Value::Int(1)])).is_err());
        assert!(cached(Value::Int(1)).is_err());
    }
}
