//! Secret masking throughput: `SecretStream::push`, what the guard runs on
//! every byte of its server's stderr once `--env-file` gave it secrets.
//!
//! The stream is 4 MiB of log-like lines (about 100 bytes, ASCII), fed in
//! 16 KiB chunks (the guard's stderr read size); one line in 1,000 carries
//! the first secret. Cases:
//!
//! - `none`: no secrets (the guard's default: the chunk is passed on as is);
//! - `1x40B`, `16x40B`: one and the most secrets of a typical token length;
//! - `1x64KiB`: one secret of the largest size;
//! - `adversarial`: a text of the secret's first byte repeated, against the
//!   secret `a…ab` (40 bytes): every byte is a partial match, the
//!   automaton's worst case.
//!
//! Not part of `bench/run`'s report; run it with
//! `cargo bench -p mcp-stdio-bench --bench secrets`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use mcp_stdio_core::Secrets;

/// Bytes of stream per iteration.
const STREAM_BYTES: usize = 4 * 1024 * 1024;
/// The guard's stderr read size.
const CHUNK: usize = 16 * 1024;

/// A 40-byte token, distinct per `i`.
fn token(i: usize) -> String {
    format!("tok-{i:04}-{}", "Zq7".repeat(11))
}

/// Log-like lines; one in 1,000 carries `secret`.
fn log_stream(secret: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(STREAM_BYTES + 200);
    let mut n = 0u64;
    while out.len() < STREAM_BYTES {
        let line = if n % 1000 == 999 {
            format!("2026-01-01T00:00:00Z INFO server: using token {secret} for request {n}\n")
        } else {
            format!(
                "2026-01-01T00:00:00Z INFO server: handled request {n} in 3 ms, 1234 bytes out\n"
            )
        };
        out.extend_from_slice(line.as_bytes());
        n += 1;
    }
    out
}

fn mask_all(secrets: &Secrets, stream: &[u8]) -> usize {
    let mut masker = secrets.stream();
    let mut out = 0;
    for chunk in stream.chunks(CHUNK) {
        out += black_box(masker.push(chunk)).len();
    }
    out + masker.finish().len()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("secrets");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(STREAM_BYTES as u64));
    let typical = log_stream(&token(0));
    let big_secret = "k".repeat(64 * 1024 - 1) + "!";
    let valid = |s: Result<Secrets, _>| s.expect("the bench's secrets are within the limits");
    let cases: Vec<(&str, Secrets, Vec<u8>)> = vec![
        ("none", Secrets::default(), typical.clone()),
        ("1x40B", valid(Secrets::new([token(0)])), typical.clone()),
        (
            "16x40B",
            valid(Secrets::new((0..16).map(token))),
            typical.clone(),
        ),
        ("1x64KiB", valid(Secrets::new([&big_secret])), typical),
        (
            "adversarial",
            valid(Secrets::new(["a".repeat(39) + "b"])),
            vec![b'a'; STREAM_BYTES],
        ),
    ];
    for (name, secrets, stream) in &cases {
        group.bench_function(*name, |b| b.iter(|| mask_all(secrets, stream)));
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
