use super::*;
use proptest::prelude::*;

fn json(body: &str) -> Fingerprint {
    Fingerprint::builder("POST", "/v1/notes")
        .content_type("application/json")
        .body(body.as_bytes())
}

#[test]
fn key_order_and_whitespace_do_not_matter() {
    assert_eq!(
        json(r#"{"a":1,"b":[true,null]}"#),
        json("{ \"b\" : [ true , null ] ,\n\"a\": 1 }")
    );
}

#[test]
fn any_changed_input_changes_the_fingerprint() {
    let base = || Fingerprint::builder("POST", "/p").content_type("application/json");
    let reference = base().query(Some("a=1")).body(b"{}");
    let variants = [
        Fingerprint::builder("PATCH", "/p")
            .content_type("application/json")
            .query(Some("a=1"))
            .body(b"{}"),
        Fingerprint::builder("POST", "/q")
            .content_type("application/json")
            .query(Some("a=1"))
            .body(b"{}"),
        base().query(Some("a=2")).body(b"{}"),
        base().query(None).body(b"{}"),
        base().query(Some("a=1")).body(br#"{"x":1}"#),
        Fingerprint::builder("POST", "/p")
            .content_type("text/plain")
            .query(Some("a=1"))
            .body(b"{}"),
        base()
            .query(Some("a=1"))
            .header("X-Tenant", b"t")
            .body(b"{}"),
    ];
    for variant in variants {
        assert_ne!(reference, variant);
    }
}

#[test]
fn query_is_sorted_by_name_but_repeated_values_keep_their_order() {
    let fp = |q| Fingerprint::builder("GET", "/").query(Some(q)).body(b"");
    assert_eq!(fp("b=2&a=1"), fp("a=1&b=2"));
    assert_ne!(fp("a=1&a=2"), fp("a=2&a=1"));
}

#[test]
fn numbers_beyond_double_precision_differ() {
    assert_ne!(
        json(r#"{"n": 9007199254740993}"#),
        json(r#"{"n": 9007199254740992}"#)
    );
}

#[test]
fn repeated_member_names_do_not_collide_with_their_deduplicated_twin() {
    assert_ne!(json(r#"{"a": 1, "a": 2}"#), json(r#"{"a": 2}"#));
    assert_ne!(json(r#"{"a": 1, "a": 2}"#), json(r#"{"a": 1}"#));
}

#[test]
fn an_object_does_not_collide_with_the_json_in_its_raw_value_member() {
    let wrapped = json(r#"{"$serde_json::private::RawValue":"[1]"}"#);
    assert_ne!(wrapped, json("[1]"));
}

#[test]
fn invalid_json_is_hashed_raw() {
    assert_ne!(json("{\"a\":"), json("{\"a\": "));
}

#[test]
fn header_names_are_case_insensitive_and_sorted() {
    let a = Fingerprint::builder("POST", "/")
        .header("X-B", b"1")
        .header("x-a", b"2")
        .body(b"");
    let b = Fingerprint::builder("POST", "/")
        .header("x-a", b"2")
        .header("x-b", b"1")
        .body(b"");
    assert_eq!(a, b);
}

#[test]
fn length_prefixes_keep_fields_apart() {
    let a = Fingerprint::builder("POST", "/ab")
        .query(Some("c=d"))
        .body(b"");
    let b = Fingerprint::builder("POST", "/a")
        .query(Some("bc=d"))
        .body(b"");
    assert_ne!(a, b);
}

proptest! {
    #[test]
    fn arbitrary_json_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = Fingerprint::builder("POST", "/").content_type("application/json").body(&body);
    }

    #[test]
    fn distinct_integers_never_share_a_fingerprint(a in any::<i64>(), b in any::<i64>()) {
        prop_assume!(a != b);
        prop_assert_ne!(json(&format!("{{\"n\":{a}}}")), json(&format!("{{\"n\":{b}}}")));
    }
}

mod equivalence;
mod reference;

#[test]
fn media_type_parameters_that_change_the_meaning_count() {
    let with = |content_type: &str| {
        Fingerprint::builder("POST", "/p")
            .content_type(content_type)
            .body(b"caf\xe9")
    };
    assert_ne!(
        with("text/plain; charset=latin1"),
        with("text/plain; charset=utf-8")
    );
    assert_ne!(
        with("multipart/form-data; boundary=a"),
        with("multipart/form-data; boundary=b")
    );
    // Spelling does not: the case of names and of a charset, quoting, order, white space.
    assert_eq!(
        with("text/plain; charset=UTF-8; format=flowed"),
        with("Text/Plain;format=\"flowed\";CHARSET=utf-8")
    );
    // Without parameters the fingerprint is what it always was.
    assert_eq!(
        json("{}"),
        Fingerprint::builder("POST", "/v1/notes")
            .content_type("application/json; charset=utf-8")
            .body(b"{}")
    );
}
