//! The stored response and its compact binary encoding (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored), [§7](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#7-replay)).

use bytes::{BufMut, Bytes, BytesMut};

const MAGIC: &[u8; 4] = b"IKR1";
const FLAG_BODY_OMITTED: u8 = 1;

/// A response as stored for replay: status, headers in their original order, body bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Header names (lower case) and values, each name's values in their original order.
    pub headers: Vec<(String, Bytes)>,
    /// The body; empty when [`StoredResponse::body_omitted`] is set.
    pub body: Bytes,
    /// The body was over the storage limit or of unknown length and was not stored.
    pub body_omitted: bool,
}

/// Why stored bytes could not be decoded into a [`StoredResponse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored response is corrupt: {0}")]
pub struct DecodeError(&'static str);

impl StoredResponse {
    /// A response with a status and a body, and no headers.
    pub fn new(status: u16, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
            body_omitted: false,
        }
    }

    /// Adds a header, keeping the order of calls.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// The same response with its body dropped and [`StoredResponse::body_omitted`] set.
    #[must_use]
    pub fn without_body(mut self) -> Self {
        self.body = Bytes::new();
        self.body_omitted = true;
        self
    }

    /// Encodes the response for storage in a single binary column.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        out.put_slice(MAGIC);
        out.put_u16(self.status);
        out.put_u8(if self.body_omitted {
            FLAG_BODY_OMITTED
        } else {
            0
        });
        out.put_u32(len_u32(self.headers.len()));
        for (name, value) in &self.headers {
            put_bytes(&mut out, name.as_bytes());
            put_bytes(&mut out, value);
        }
        put_bytes(&mut out, &self.body);
        out.to_vec()
    }

    /// The length of [`Self::encode`]'s bytes, without encoding: what a store keeps for this
    /// response (per-actor byte caps count it).
    pub fn encoded_len(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| 4 + n.len() + 4 + v.len())
            .sum();
        // Magic, status, flags, header count; the headers; the body with its length.
        MAGIC.len() + 2 + 1 + 4 + headers + 4 + self.body.len()
    }

    /// Decodes stored bytes. Never panics and never allocates more than the input's size.
    pub fn decode(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)?.as_ref() != MAGIC {
            return Err(DecodeError("unknown format"));
        }
        let status = u16::from_be_bytes(r.array()?);
        let [flags] = r.array()?;
        let count = u32::from_be_bytes(r.array()?) as usize;
        // Each header needs at least 8 bytes, so a count beyond that is corrupt.
        if count > r.remaining() / 8 {
            return Err(DecodeError("header count"));
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name =
                String::from_utf8(r.chunk()?.to_vec()).map_err(|_| DecodeError("header name"))?;
            headers.push((name, r.chunk()?));
        }
        let body = r.chunk()?;
        if r.remaining() != 0 {
            return Err(DecodeError("trailing bytes"));
        }
        Ok(Self {
            status,
            headers,
            body,
            body_omitted: flags & FLAG_BODY_OMITTED != 0,
        })
    }
}

fn len_u32(n: usize) -> u32 {
    // Stored responses are bounded by the storage limit (MiBs), far below 4 GiB.
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    out.put_u32(len_u32(bytes.len()));
    out.put_slice(bytes);
}

struct Reader {
    bytes: Bytes,
    at: usize,
}

impl Reader {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError("truncated"));
        }
        self.at += n;
        Ok(self.bytes.slice(self.at - n..self.at))
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let taken = self.take(N)?;
        taken
            .as_ref()
            .try_into()
            .map_err(|_| DecodeError("truncated"))
    }

    fn chunk(&mut self) -> Result<Bytes, DecodeError> {
        let n = u32::from_be_bytes(self.array()?) as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let response = StoredResponse::new(201, &b"{\"id\":\"n1\"}"[..])
            .with_header("Location", &b"/v1/notes/n1"[..])
            .with_header("vary", &b"a"[..])
            .with_header("vary", &b"b"[..]);
        let decoded = StoredResponse::decode(response.encode().into()).unwrap();
        assert_eq!(decoded, response);
        let omitted = response.without_body();
        assert_eq!(
            StoredResponse::decode(omitted.encode().into()).unwrap(),
            omitted
        );
    }

    #[test]
    fn encoded_len_is_the_length_of_the_encoding() {
        let response = StoredResponse::new(201, &b"{\"id\":\"n1\"}"[..])
            .with_header("Location", &b"/v1/notes/n1"[..])
            .with_header("vary", &b""[..]);
        for response in [
            response.clone(),
            response.without_body(),
            StoredResponse::new(204, ""),
        ] {
            assert_eq!(response.encoded_len(), response.encode().len());
        }
    }

    #[test]
    fn corrupt_input_is_an_error() {
        let good = StoredResponse::new(200, &b"body"[..]).encode();
        for cut in 0..good.len() {
            assert!(StoredResponse::decode(Bytes::copy_from_slice(&good[..cut])).is_err());
        }
        let mut huge = good.clone();
        huge[7..11].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(StoredResponse::decode(huge.into()).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = StoredResponse::decode(bytes.into());
            let _ = StoredResponse::decode(with_magic.into());
        }

        #[test]
        fn any_response_round_trips(
            status in 100u16..600,
            headers in proptest::collection::vec(("[a-z-]{1,20}", proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let response = StoredResponse {
                status,
                headers: headers.into_iter().map(|(n, v)| (n, Bytes::from(v))).collect(),
                body: body.into(),
                body_omitted: false,
            };
            prop_assert_eq!(StoredResponse::decode(response.encode().into()).unwrap(), response);
        }
    }
}
