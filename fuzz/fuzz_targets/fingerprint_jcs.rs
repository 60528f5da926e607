//! Request fingerprints of arbitrary JSON bodies (RFC 8785 JCS when lossless, raw bytes
//! otherwise): never panic. And when a body was canonicalised (its fingerprint is not the
//! raw-bytes one, computed here from the documented `fp-v1` encoding), serde_json's own
//! re-serialisation of it, with other whitespace and member order, gets the same fingerprint.
#![no_main]

use idemkey_core::Fingerprint;
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

fn field(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
}

/// `fp-v1` of `POST /` with `application/json` and the body hashed raw (behaviour §4).
fn raw(body: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in [&b"fp-v1"[..], b"POST", b"/"] {
        field(&mut hash, part);
    }
    hash.update(0u64.to_be_bytes());
    field(&mut hash, b"application/json");
    field(&mut hash, b"raw");
    field(&mut hash, &Sha256::digest(body));
    hash.update(0u64.to_be_bytes());
    hash.finalize().into()
}

fn json(body: &[u8]) -> Fingerprint {
    Fingerprint::builder("POST", "/")
        .content_type("application/json")
        .body(body)
}

fuzz_target!(|body: &[u8]| {
    let fingerprint = json(body);
    if fingerprint.as_bytes() == &raw(body) {
        return;
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).expect("only JSON is canonicalised");
    let pretty = serde_json::to_vec_pretty(&value).expect("a value serialises");
    assert_eq!(
        json(&pretty),
        fingerprint,
        "{}",
        String::from_utf8_lossy(body)
    );
});
