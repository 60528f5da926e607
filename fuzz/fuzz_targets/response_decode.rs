//! Stored responses read back from the database: any bytes decode or fail, never panic and
//! never allocate beyond the input (run with `-malloc_limit_mb`); what decodes re-encodes to
//! something that decodes to the same response.
#![no_main]

use bytes::Bytes;
use idemkey_core::StoredResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(response) = StoredResponse::decode(Bytes::copy_from_slice(data)) {
        let again = StoredResponse::decode(response.encode().into());
        assert_eq!(again.as_ref(), Ok(&response));
    }
});
