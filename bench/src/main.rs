//! `mcp-stdio-bench` — the end-to-end benchmarks of mcp-stdio against its
//! peers, and the writer of `BENCHMARKS.md`.
//!
//! ```text
//! mcp-stdio-bench report [--out FILE] [--criterion DIR] [--quick] [--only SCENARIO]
//!     runs every case, each in a fresh process, reads the framing results
//!     criterion left in DIR (default: <repo>/target/criterion), and writes
//!     FILE (default: <repo>/BENCHMARKS.md). `bench/run` is the entry point.
//! mcp-stdio-bench case SCENARIO CLIENT
//!     runs one case in this process and prints its result as one JSON line.
//! mcp-stdio-bench soak [--minutes N | --seconds N] [--seed S] [--sessions N] [--report FILE]
//!     waves of concurrent sessions (every adapter's Client and the guard)
//!     against misbehaving fixture servers, invariants checked as it runs;
//!     exits 1 at the first breach with the seed that replays it (SOAK.md).
//! ```
//!
//! Scenarios: `large` (one 8 MiB tool result), `ping` (10,000 sequential
//! pings), `flood` (1 GiB of server stderr), `cancel` (cancel, then ping,
//! while an 8 MiB response is in flight), `oversized` (a 512 MiB line against
//! a 4 MiB limit), `id-last` / `id-last-16mib` (a 4 / 16 MiB response whose id
//! comes last, against a 1 MiB limit: frame end → the request's error),
//! `text5` (a 5 MiB text result, for `guard --max-result-text` side by side
//! with `bench/compare`; the spawned process's peak RSS and CPU). See
//! `cases` for the clients and BENCHMARKS.md for the method.
#![forbid(unsafe_code)]

mod cases;
mod mem;
mod report;
mod soak;
mod stats;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("case") if args.len() == 3 => cases::run(&args[1], &args[2]),
        Some("report") => report::run(&args[1..]),
        Some("soak") => soak::run(&args[1..]),
        _ => Err(
            "usage: mcp-stdio-bench report [--out FILE] [--criterion DIR] [--quick] \
                  [--only SCENARIO] | mcp-stdio-bench case SCENARIO CLIENT | mcp-stdio-bench soak \
                  [--minutes N | --seconds N] [--seed S] [--sessions N] [--report FILE]"
                .to_owned(),
        ),
    };
    if let Err(e) = outcome {
        eprintln!("mcp-stdio-bench: {e}");
        std::process::exit(2);
    }
}
