//! Micro-benchmarks of the per-request work in idemkey-core: parsing the key, fingerprinting
//! the request (RFC 8785 canonical JSON + SHA-256) and encoding and decoding the stored
//! response. Run with `cargo bench -p idemkey-core`.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idemkey_core::{Fingerprint, Key, StoredResponse};

/// A JSON object of about `size` bytes: a title and a list of small items, as an API sees.
fn json_body(size: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut len = 0;
    let mut i = 0;
    while len < size.saturating_sub(40) {
        let item = format!(
            r#"{{"id":{i},"name":"item-{i}","price":{}.5,"tags":["a","b"],"ok":true}}"#,
            i * 3
        );
        len += item.len() + 1;
        items.push(item);
        i += 1;
    }
    format!(r#"{{"title":"order","items":[{}]}}"#, items.join(",")).into_bytes()
}

fn keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("key");
    let long = "k".repeat(255);
    let cases = [
        ("bare", "order-42-7f3a9c".to_owned()),
        ("quoted", r#""order-42-7f3a9c""#.to_owned()),
        ("255 chars", long),
    ];
    for (name, value) in cases {
        group.bench_with_input(BenchmarkId::new("parse", name), &value, |b, value| {
            b.iter(|| Key::parse(black_box(value.as_bytes())).unwrap());
        });
    }
    group.finish();
}

fn fingerprints(c: &mut Criterion) {
    let mut group = c.benchmark_group("fingerprint");
    // The notes service's own body: what every keyed request of `idemkey-bench` pays.
    let note = br#"{"title":"bench-1a2b3c4d-k-0-1"}"#;
    group.bench_function("json/note body", |b| {
        b.iter(|| {
            Fingerprint::builder("POST", "/v1/notes")
                .content_type("application/json")
                .body(black_box(note))
        });
    });
    for size in [1024, 64 * 1024] {
        let body = json_body(size);
        group.throughput(Throughput::Bytes(body.len() as u64));
        let label = format!("{} KiB", size / 1024);
        for (kind, media_type) in [
            ("json", "application/json"),
            ("raw", "application/octet-stream"),
        ] {
            group.bench_with_input(BenchmarkId::new(kind, &label), &body, |b, body| {
                b.iter(|| {
                    Fingerprint::builder("POST", "/v1/orders")
                        .content_type(media_type)
                        .body(black_box(body))
                });
            });
        }
    }
    group.finish();
}

fn stored_responses(c: &mut Criterion) {
    let mut group = c.benchmark_group("stored response");
    for size in [1024, 64 * 1024] {
        let response = StoredResponse::new(201, json_body(size))
            .with_header("content-type", "application/json")
            .with_header(
                "location",
                "/v1/orders/8c0e2a52-52d3-4a1b-9d9a-2f1f0b6c8e11",
            );
        let encoded = Bytes::from(response.encode());
        group.throughput(Throughput::Bytes(encoded.len() as u64));
        let label = format!("{} KiB", size / 1024);
        group.bench_with_input(BenchmarkId::new("encode", &label), &response, |b, r| {
            b.iter(|| black_box(r).encode());
        });
        group.bench_with_input(BenchmarkId::new("decode", &label), &encoded, |b, e| {
            b.iter(|| StoredResponse::decode(black_box(e.clone())).unwrap());
        });
    }
    group.finish();
}

criterion_group!(benches, keys, fingerprints, stored_responses);
criterion_main!(benches);
