"""Schemathesis hooks for idemkey: every well-formed Idempotency-Key is made unique.

Schemathesis generates keys from the document's pattern, and two test cases may draw the same
one with different bodies: idemkey then rightly answers 422 key-reused, which is not what a
test of one request means. Malformed or missing keys are left alone, so the negative tests
still reach idemkey's key validation.
"""

import re
import uuid

import schemathesis

# The two forms the document's pattern describes: bare, and a structured-field string.
WELL_FORMED = re.compile(r'^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$')


@schemathesis.hook
def before_call(context, case, kwargs):
    headers = case.headers or {}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and WELL_FORMED.match(key):
        headers["Idempotency-Key"] = "st-" + uuid.uuid4().hex
        case.headers = headers
