//! A delivery as the inbox reads it, whatever the broker.

use idemkey_core::{Fingerprint, Key};

use crate::DeadLetter;

/// One delivery of a message, as the inbox reads it.
#[derive(Clone, Debug)]
pub struct Incoming<'a> {
    /// The message's own id (JetStream's `Nats-Msg-Id`, or a header the consumer names);
    /// `None` when it has none: such a message is refused, never processed unkeyed.
    pub id: Option<&'a str>,
    /// The subject it was published to: part of the fingerprint.
    pub subject: &'a str,
    /// The payload, byte for byte: part of the fingerprint.
    pub payload: &'a [u8],
    /// The headers the consumer names for the fingerprint, with their values as received.
    pub headers: Vec<(&'a str, &'a [u8])>,
    /// Which delivery of the message this is: 1 for the first.
    pub delivered: u64,
}

impl Incoming<'_> {
    /// The message's key: its id, which must be 1 to 255 visible ASCII characters; else why
    /// the message goes to the dead-letter path unprocessed.
    pub(crate) fn key(&self) -> Result<Key, DeadLetter> {
        let id = self.id.ok_or(DeadLetter::NoId)?;
        Key::parse(id.as_bytes()).map_err(|error| DeadLetter::InvalidId(error.to_string()))
    }

    /// What a redelivery or a republish must match: the subject, the named headers and the
    /// payload's bytes.
    pub(crate) fn fingerprint(&self) -> Fingerprint {
        let mut builder = Fingerprint::builder("MESSAGE", self.subject);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        builder.body(self.payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(payload: &'static [u8], header: &'static [u8]) -> Incoming<'static> {
        Incoming {
            id: Some("m-1"),
            subject: "orders",
            payload,
            headers: vec![("Tenant", header)],
            delivered: 1,
        }
    }

    #[test]
    fn the_fingerprint_covers_payload_subject_and_named_headers() {
        let one = incoming(b"{\"a\":1}", b"t1").fingerprint();
        assert_eq!(one, incoming(b"{\"a\":1}", b"t1").fingerprint());
        assert_ne!(one, incoming(b"{\"a\": 1}", b"t1").fingerprint());
        assert_ne!(one, incoming(b"{\"a\":1}", b"t2").fingerprint());
        let elsewhere = Incoming {
            subject: "refunds",
            ..incoming(b"{\"a\":1}", b"t1")
        };
        assert_ne!(one, elsewhere.fingerprint());
    }

    #[test]
    fn a_message_without_a_usable_id_is_refused() {
        let none = Incoming {
            id: None,
            ..incoming(b"", b"")
        };
        assert!(matches!(none.key(), Err(DeadLetter::NoId)));
        let spaced = Incoming {
            id: Some("has space"),
            ..incoming(b"", b"")
        };
        assert!(matches!(spaced.key(), Err(DeadLetter::InvalidId(_))));
    }
}
