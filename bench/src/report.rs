//! `report`: runs every case in a fresh process, reads criterion's framing
//! samples, and writes BENCHMARKS.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cases::{
    self, CaseResult, Trial, CANCEL_TRIALS, CANCEL_WARMUP, CANCEL_WORK_MS, FLOOD_BYTES,
    ID_LAST_LIMIT, ID_LAST_TRIALS, ID_LAST_WAIT, LARGE_BYTES, LARGE_CALLS, LARGE_LIMIT,
    OVERSIZED_LIMIT, OVERSIZED_LINE, PINGS, PING_WARMUP,
};
use crate::stats::{mib, percentile, ratio, Summary};

/// The stderr capture budget our clients run with in the flood scenario (the
/// default), and the line-forwarding queue's worst case (64 lines of 2 KiB).
const OUR_STDERR_BUDGET: f64 = 16.0 * 1024.0 + 64.0 * 2048.0;
/// The "small constant" allowed on top of the budgets: allocator and page
/// granularity, stacks touched deeper than before.
const SMALL_CONSTANT: f64 = 1024.0 * 1024.0;
/// Fresh processes per client in the large-response scenario.
const LARGE_PROCESSES: usize = 5;
/// Virtual memory cap (`ulimit -v`) for the oversized and flood cases.
const MEMORY_CAP_KIB: u64 = 6 * 1024 * 1024;
/// Fresh processes per client in the id-last scenarios.
const ID_LAST_PROCESSES: usize = 2;
/// The id-last scenarios, in report order.
const ID_LAST_SCENARIOS: [&str; 2] = ["id-last", "id-last-16mib"];
/// The goal: frame end → the request's error.
const ID_LAST_GOAL_MS: f64 = 10.0;

struct Opts {
    out: PathBuf,
    criterion: PathBuf,
    quick: bool,
    only: Option<String>,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .expect("bench/ has a parent: the repository")
}

fn parse_opts(args: &[String]) -> Result<Opts, String> {
    let root = repo_root();
    let mut opts = Opts {
        out: root.join("BENCHMARKS.md"),
        criterion: root.join("target/criterion"),
        quick: false,
        only: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--out" => opts.out = PathBuf::from(value()?),
            "--criterion" => opts.criterion = PathBuf::from(value()?),
            "--only" => opts.only = Some(value()?),
            "--quick" => opts.quick = true,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(opts)
}

/// How a case process is started.
enum Runner {
    /// This executable, `case SCENARIO CLIENT`.
    Own,
    /// Another program with its arguments (the SDK scripts).
    External(PathBuf, Vec<String>),
}

struct Job {
    scenario: &'static str,
    client: &'static str,
    runner: Runner,
    processes: usize,
    cap_kib: Option<u64>,
}

/// The installed interop peers, if any.
struct Peers {
    ts_sdk: Option<PathBuf>,
    python: Option<PathBuf>,
}

impl Peers {
    fn find() -> Self {
        let dir = std::env::var_os("MCP_STDIO_INTEROP_DIR")
            .map_or_else(|| repo_root().join("target/interop"), PathBuf::from);
        let sdk = dir.join("npm/node_modules/@modelcontextprotocol/sdk");
        let node_ok = Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let python = dir.join("venv/bin/python");
        Self {
            ts_sdk: (node_ok && sdk.join("package.json").is_file()).then_some(sdk),
            python: python.is_file().then_some(python),
        }
    }
}

fn jobs(opts: &Opts, peers: &Peers) -> Vec<Job> {
    let n = |full: usize| if opts.quick { 1 } else { full };
    let own = |scenario, client, processes, cap_kib| Job {
        scenario,
        client,
        runner: Runner::Own,
        processes,
        cap_kib,
    };
    let peers_dir = repo_root().join("bench/peers");
    let mut jobs = Vec::new();
    for scenario in ["large", "large-fast"] {
        let server = cases::server_for(scenario).display().to_string();
        let sdk_args = |mut v: Vec<String>| {
            v.extend([
                "--server".to_owned(),
                server.clone(),
                "--bytes".to_owned(),
                LARGE_BYTES.to_string(),
                "--calls".to_owned(),
                LARGE_CALLS.to_string(),
            ]);
            v
        };
        for client in [
            "tokio",
            "tokio-value",
            "async-std",
            "blocking",
            "rmcp",
            "rmcp-ours",
            "raw",
            "raw-rawvalue",
        ] {
            jobs.push(own(scenario, client, n(LARGE_PROCESSES), None));
        }
        if let Some(sdk) = &peers.ts_sdk {
            jobs.push(Job {
                scenario,
                client: "ts-sdk",
                runner: Runner::External(
                    PathBuf::from("node"),
                    sdk_args(vec![
                        peers_dir.join("ts_client.mjs").display().to_string(),
                        "--sdk".to_owned(),
                        sdk.display().to_string(),
                    ]),
                ),
                processes: n(LARGE_PROCESSES),
                cap_kib: None,
            });
        }
        if let Some(python) = &peers.python {
            jobs.push(Job {
                scenario,
                client: "py-sdk",
                runner: Runner::External(
                    python.clone(),
                    sdk_args(vec![peers_dir.join("py_client.py").display().to_string()]),
                ),
                processes: n(LARGE_PROCESSES),
                cap_kib: None,
            });
        }
    }
    // The guard's overhead: the same tokio client, direct and through `mcp-stdio guard`.
    jobs.push(own("large-fast", "tokio-guard", n(LARGE_PROCESSES), None));
    jobs.push(own("ping-quiet", "tokio-guard", n(3), None));
    for scenario in ["ping", "ping-quiet"] {
        for client in [
            "tokio",
            "async-std",
            "blocking",
            "rmcp",
            "rmcp-lines",
            "rmcp-ours",
            "raw",
        ] {
            jobs.push(own(scenario, client, n(3), None));
        }
    }
    for client in [
        "tokio",
        "async-std",
        "blocking",
        "rmcp-lines",
        "rmcp-keep-all",
    ] {
        jobs.push(own("flood", client, n(2), Some(MEMORY_CAP_KIB)));
    }
    for scenario in ["cancel", "cancel-early"] {
        for client in ["tokio", "async-std", "blocking", "rmcp"] {
            jobs.push(own(scenario, client, n(2), None));
        }
    }
    for client in [
        "tokio",
        "async-std",
        "blocking",
        "lines-codec",
        "lines-codec-unbounded",
        "rmcp",
        "rmcp-4mib",
    ] {
        jobs.push(own("oversized", client, n(2), Some(MEMORY_CAP_KIB)));
    }
    for scenario in ID_LAST_SCENARIOS {
        for client in [
            "tokio",
            "async-std",
            "blocking",
            "rmcp-1mib",
            "rmcp",
            "lines-codec",
        ] {
            jobs.push(own(scenario, client, n(ID_LAST_PROCESSES), None));
        }
        let line_bytes = cases::id_last_line(scenario).unwrap_or_default();
        let id_last_args = |mut v: Vec<String>| {
            v.extend([
                "--id-last".to_owned(),
                "--server".to_owned(),
                cases::bench_peer().display().to_string(),
                "--line-bytes".to_owned(),
                line_bytes.to_string(),
                "--trials".to_owned(),
                ID_LAST_TRIALS.to_string(),
                "--wait-ms".to_owned(),
                ID_LAST_WAIT.as_millis().to_string(),
            ]);
            v
        };
        if let Some(sdk) = &peers.ts_sdk {
            let ts = |extra: &[String]| {
                let mut v = vec![
                    peers_dir.join("ts_client.mjs").display().to_string(),
                    "--sdk".to_owned(),
                    sdk.display().to_string(),
                ];
                v.extend_from_slice(extra);
                Runner::External(PathBuf::from("node"), id_last_args(v))
            };
            for (client, extra) in [
                ("ts-sdk", Vec::new()),
                (
                    "ts-sdk-1mib",
                    vec!["--max-buffer".to_owned(), ID_LAST_LIMIT.to_string()],
                ),
            ] {
                jobs.push(Job {
                    scenario,
                    client,
                    runner: ts(&extra),
                    processes: n(ID_LAST_PROCESSES),
                    cap_kib: None,
                });
            }
        }
        if let Some(python) = &peers.python {
            jobs.push(Job {
                scenario,
                client: "py-sdk",
                runner: Runner::External(
                    python.clone(),
                    id_last_args(vec![peers_dir.join("py_client.py").display().to_string()]),
                ),
                processes: n(ID_LAST_PROCESSES),
                cap_kib: None,
            });
        }
    }
    if let Some(only) = &opts.only {
        jobs.retain(|j| j.scenario.starts_with(only.as_str()));
    }
    jobs
}

/// Runs one case process with a deadline; parses its JSON line.
fn run_process(job: &Job) -> Result<CaseResult, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (program, args): (PathBuf, Vec<String>) = match &job.runner {
        Runner::Own => (
            exe,
            vec![
                "case".to_owned(),
                job.scenario.to_owned(),
                job.client.to_owned(),
            ],
        ),
        Runner::External(p, a) => (p.clone(), a.clone()),
    };
    let mut cmd = match job.cap_kib {
        // `ulimit -v` through a shell: the cap applies to the case process only.
        Some(kib) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg("ulimit -v \"$1\" && shift && exec \"$@\"")
                .arg("sh")
                .arg(kib.to_string())
                .arg(&program)
                .args(&args);
            c
        }
        None => {
            let mut c = Command::new(&program);
            c.args(&args);
            c
        }
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", program.display()))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("timed out after 180 s (killed)".to_owned());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("case process failed: {status}"));
    }
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or("no JSON result line")?;
    serde_json::from_str(line).map_err(|e| format!("bad result line: {e}"))
}

type Results = BTreeMap<(&'static str, &'static str), Vec<Result<CaseResult, String>>>;

/// Runs every job. Within a scenario the processes of its clients take
/// turns (client A, B, C, A, B, C, …), so that a burst of load from other
/// work on the machine falls on every client alike rather than on one.
fn run_jobs(jobs: &[Job]) -> Results {
    let mut results = Results::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for job in jobs {
        if !scenarios.contains(&job.scenario) {
            scenarios.push(job.scenario);
        }
    }
    for scenario in scenarios {
        let group: Vec<&Job> = jobs.iter().filter(|j| j.scenario == scenario).collect();
        let rounds = group.iter().map(|j| j.processes).max().unwrap_or(0);
        for round in 0..rounds {
            for job in group.iter().filter(|j| round < j.processes) {
                let start = Instant::now();
                let r = run_process(job);
                eprintln!(
                    "bench: {:<12} {:<22} {}/{} {:>6.1} s {}",
                    job.scenario,
                    job.client,
                    round + 1,
                    job.processes,
                    start.elapsed().as_secs_f64(),
                    match &r {
                        Ok(_) => "ok".to_owned(),
                        Err(e) => format!("FAILED: {e}"),
                    }
                );
                results
                    .entry((job.scenario, job.client))
                    .or_default()
                    .push(r);
            }
        }
    }
    results
}

/// The successful processes of one case.
fn ok<'a>(results: &'a Results, scenario: &str, client: &str) -> Vec<&'a CaseResult> {
    results
        .iter()
        .filter(|((s, c), _)| *s == scenario && *c == client)
        .flat_map(|(_, v)| v.iter().filter_map(|r| r.as_ref().ok()))
        .collect()
}

/// The failures of one case, as text.
fn failures(results: &Results, scenario: &str, client: &str) -> Vec<String> {
    results
        .iter()
        .filter(|((s, c), _)| *s == scenario && *c == client)
        .flat_map(|(_, v)| v.iter().filter_map(|r| r.as_ref().err().cloned()))
        .collect()
}

/// Host CPU time of every measured operation, seconds.
fn cpu_seconds(runs: &[&CaseResult]) -> Vec<f64> {
    runs.iter()
        .flat_map(|r| r.cpu_ns.iter().map(|&t| t as f64 / 1e9))
        .collect()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------- framing

/// Throughput samples (GB/s) of one criterion benchmark.
struct FramingRow {
    /// `framing/<frame>/<chunk>` → implementation → throughput samples, GB/s.
    by_group: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
}

fn read_criterion(dir: &Path) -> FramingRow {
    let mut by_group: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let Ok(groups) = std::fs::read_dir(dir) else {
        return FramingRow { by_group };
    };
    for group in groups.flatten() {
        let Ok(funcs) = std::fs::read_dir(group.path()) else {
            continue;
        };
        for func in funcs.flatten() {
            let new = func.path().join("new");
            let (Ok(bench), Ok(sample)) = (
                std::fs::read_to_string(new.join("benchmark.json")),
                std::fs::read_to_string(new.join("sample.json")),
            ) else {
                continue;
            };
            let (Ok(bench), Ok(sample)) = (
                serde_json::from_str::<serde_json::Value>(&bench),
                serde_json::from_str::<serde_json::Value>(&sample),
            ) else {
                continue;
            };
            let Some(group_id) = bench["group_id"].as_str() else {
                continue;
            };
            if !group_id.starts_with("framing/") {
                continue;
            }
            let name = bench["value_str"]
                .as_str()
                .or_else(|| bench["function_id"].as_str())
                .unwrap_or("?")
                .to_owned();
            let Some(bytes) = bench["throughput"]["Bytes"].as_f64() else {
                continue;
            };
            let iters = sample["iters"].as_array().cloned().unwrap_or_default();
            let times = sample["times"].as_array().cloned().unwrap_or_default();
            let gbps: Vec<f64> = iters
                .iter()
                .zip(&times)
                .filter_map(|(i, t)| Some(bytes * i.as_f64()? / t.as_f64()?))
                .collect();
            by_group
                .entry(group_id.to_owned())
                .or_default()
                .insert(name, gbps);
        }
    }
    FramingRow { by_group }
}

const FRAMING_IMPLS: [(&str, &str); 6] = [
    ("framer", "our `Framer`"),
    ("lines_codec", "`LinesCodec`"),
    ("read_until", "`read_until`"),
    ("memchr", "memchr"),
    ("memchr_utf8", "memchr + UTF-8"),
    ("memchr_in_memory", "memchr, no read copy"),
];

/// Goal verdicts collected while writing the sections.
#[derive(Default)]
struct Verdicts {
    rows: Vec<(String, String, String)>,
}

impl Verdicts {
    fn add(&mut self, goal: &str, result: String, met: Option<bool>) {
        let verdict = match met {
            Some(true) => "**met**",
            Some(false) => "**not met**",
            None => "no data",
        };
        self.rows
            .push((goal.to_owned(), result, verdict.to_owned()));
    }
}

fn frame_order(group: &str) -> (usize, usize) {
    let size = |s: &str| match s {
        "200B" => 0,
        "64KiB" => 2,
        "8MiB" => 3,
        "4KiB" => 1,
        _ => 9,
    };
    let mut parts = group.split('/').skip(1);
    let f = parts.next().map_or(9, size);
    let c = parts.next().map_or(9, size);
    (f, c)
}

fn framing_section(md: &mut String, data: &FramingRow, verdicts: &mut Verdicts) {
    md.push_str("## 1. Framing throughput\n\n");
    if data.by_group.is_empty() {
        md.push_str("No criterion results found (run `cargo bench -p mcp-stdio-bench --bench framing`).\n\n");
        verdicts.add(
            "framing ≥ 0.85× memchr + UTF-8 (frames ≥ 64 KiB)",
            "–".into(),
            None,
        );
        verdicts.add("framing ≥ 2× LinesCodec (every row)", "–".into(), None);
        return;
    }
    md.push_str(
        "GB/s (10⁹ bytes/s) of stream framed, median of 20 criterion samples (min–max). \
         Every decoder gets the bytes through `read()` calls of at most the chunk size \
         that copy them into its own buffer, as a pipe does (see `bench/benches/framing.rs`).\n\n",
    );
    md.push_str("| frame | chunk |");
    for (_, title) in FRAMING_IMPLS {
        let _ = write!(md, " {title} |");
    }
    md.push_str(
        " ours ÷ memchr+UTF-8 | ours ÷ memchr | ours ÷ LinesCodec | ours ÷ read_until |\n|---|---|",
    );
    for _ in 0..FRAMING_IMPLS.len() + 4 {
        md.push_str("---|");
    }
    md.push('\n');
    let mut groups: Vec<_> = data.by_group.iter().collect();
    groups.sort_by_key(|(g, _)| frame_order(g));
    let mut vs_utf8_big = Vec::new();
    let mut vs_codec = Vec::new();
    for (group, impls) in groups {
        let mut parts = group.split('/').skip(1);
        let frame = parts.next().unwrap_or("?");
        let chunk = parts.next().unwrap_or("?");
        let _ = write!(md, "| {frame} | {chunk} |");
        let med = |name: &str| impls.get(name).and_then(|v| Summary::of(v));
        for (name, _) in FRAMING_IMPLS {
            match med(name) {
                Some(s) => {
                    let _ = write!(md, " {} |", s.show(2));
                }
                None => md.push_str(" – |"),
            }
        }
        let ours = med("framer").map(|s| s.median);
        for base in ["memchr_utf8", "memchr", "lines_codec", "read_until"] {
            let r = ours.zip(med(base).map(|s| s.median));
            let _ = write!(md, " {} |", r.map_or("–".to_owned(), |(a, b)| ratio(a, b)));
            if let Some((a, b)) = r {
                if base == "memchr_utf8" && frame != "200B" {
                    vs_utf8_big.push((format!("{frame}/{chunk}"), a / b));
                }
                if base == "lines_codec" {
                    vs_codec.push((format!("{frame}/{chunk}"), a / b));
                }
            }
        }
        md.push('\n');
    }
    md.push('\n');
    let show = |v: &[(String, f64)]| {
        v.iter()
            .map(|(k, r)| format!("{k} {r:.2}×"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    verdicts.add(
        "Framing ≥ 0.85× the memchr + UTF-8 limit on frames ≥ 64 KiB",
        show(&vs_utf8_big),
        (!vs_utf8_big.is_empty()).then(|| vs_utf8_big.iter().all(|(_, r)| *r >= 0.85)),
    );
    verdicts.add(
        "Framing ≥ 2× `LinesCodec` in every row",
        show(&vs_codec),
        (!vs_codec.is_empty()).then(|| vs_codec.iter().all(|(_, r)| *r >= 2.0)),
    );
}

// ---------------------------------------------------------------- large

const LARGE_CLIENTS: [(&str, &str); 10] = [
    ("tokio", "ours, tokio"),
    ("tokio-value", "ours, tokio + result parsed to `Value`"),
    ("async-std", "ours, async-std"),
    ("blocking", "ours, blocking"),
    ("rmcp", "rmcp (child process)"),
    ("rmcp-ours", "rmcp over mcp-stdio (`ClientTransport`)"),
    ("raw", "raw pipe read (limit)"),
    ("raw-rawvalue", "raw read + `&RawValue` parse"),
    ("ts-sdk", "TypeScript SDK (node)"),
    ("py-sdk", "Python `mcp`"),
];

/// `fast`: the `large-fast` scenario (bench-peer streams the response).
fn large_section(md: &mut String, results: &Results, verdicts: &mut Verdicts, fast: bool) {
    let scenario = if fast { "large-fast" } else { "large" };
    if fast {
        let _ = write!(
            md,
            "### 2b. The same, the server's cost taken out\n\n\
             The same calls against `bench-peer`, which writes the same response line \
             (`big {{bytes}}`: one text block of N `x`) from a 1 MiB buffer instead of building \
             it: the time is then the pipe and the client.\n\n"
        );
    } else {
        let _ = write!(
            md,
            "## 2. End to end: one 8 MiB tool result\n\n\
             `tools/call big {{bytes: {LARGE_BYTES}}}` on the fixture server (a response line of \
             8 MiB + 70 bytes), {LARGE_CALLS} calls per process, {LARGE_PROCESSES} fresh processes \
             per client, the clients' processes taking turns. Time: request written → result \
             in hand, calls 2–{LARGE_CALLS} of every process pooled (the first call is shown \
             apart). Host CPU: CPU time of the host process (all its threads, \
             `CLOCK_PROCESS_CPUTIME_ID`; the server's work excluded) per warm call. RSS growth: \
             peak RSS during the call minus RSS before it (`VmHWM` reset through \
             `/proc/self/clear_refs`), first call of each process — what one 8 MiB response \
             costs a fresh host. Our clients run with `max_frame` = 16 MiB (rmcp's default \
             line limit). The time includes the fixture building the response (the same for \
             every client), so the raw pipe read is the floor.\n\n"
        );
    }
    md.push_str(
        "| client | warm call, ms | first call, ms | MB/s | throughput ÷ raw pipe | \
         throughput ÷ rmcp | time ÷ RawValue reader | host CPU, ms | CPU ÷ rmcp | \
         RSS growth, first call, MiB | RSS growth, warm calls, MiB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let warm = |client: &str| -> Option<Summary> {
        let v: Vec<f64> = ok(results, scenario, client)
            .iter()
            .flat_map(|r| r.times_ns.iter().skip(1).map(|&t| ms(t)))
            .collect();
        Summary::of(&v)
    };
    let cpu = |client: &str| -> Option<Summary> {
        let v: Vec<f64> = ok(results, scenario, client)
            .iter()
            .flat_map(|r| r.cpu_ns.iter().skip(1).map(|&t| ms(t)))
            .collect();
        Summary::of(&v)
    };
    let raw_t = warm("raw").map(|s| s.median);
    let rv_t = warm("raw-rawvalue").map(|s| s.median);
    let rmcp_t = warm("rmcp").map(|s| s.median);
    let rmcp_cpu = cpu("rmcp").map(|s| s.median);
    let mut growth_first = BTreeMap::new();
    for (client, title) in LARGE_CLIENTS {
        let runs = ok(results, scenario, client);
        let fails = failures(results, scenario, client);
        if runs.is_empty() {
            if !fails.is_empty() {
                let _ = writeln!(md, "| {title} | failed: {} |||||||||", fails.join("; "));
            }
            continue;
        }
        let first: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.times_ns.first())
            .map(|&t| ms(t))
            .collect();
        let g_first: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.growth.first())
            .map(|&g| mib(g as f64))
            .collect();
        let g_warm: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.growth.iter().skip(1).map(|&g| mib(g as f64)))
            .collect();
        let Some(w) = warm(client) else { continue };
        let c = cpu(client);
        let mbps = LARGE_BYTES as f64 / (w.median / 1e3) / 1e6;
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {mbps:.0} | {} | {} | {} | {} | {} | {} | {} |",
            w.show(2),
            Summary::of(&first).map_or("–".into(), |s| s.show(1)),
            raw_t.map_or("–".into(), |r| ratio(r, w.median)),
            rmcp_t.map_or("–".into(), |r| ratio(r, w.median)),
            rv_t.map_or("–".into(), |r| ratio(w.median, r)),
            c.map_or("–".into(), |s| s.show(2)),
            c.zip(rmcp_cpu)
                .map_or("–".into(), |(s, r)| ratio(s.median, r)),
            Summary::of(&g_first).map_or("–".into(), |s| s.show(1)),
            Summary::of(&g_warm).map_or("–".into(), |s| s.show(1)),
        );
        if let Some(s) = Summary::of(&g_first) {
            growth_first.insert(client, s.median);
        }
        let notes: Vec<&String> = runs.iter().flat_map(|r| r.notes.iter()).collect();
        if let Some(n) = notes.first() {
            let _ = writeln!(md, "| ↳ {n} ||||||||||||");
        }
    }
    md.push('\n');
    let ours = ["tokio", "async-std", "blocking"];
    let per = |f: &dyn Fn(&str) -> Option<f64>| -> Vec<(String, f64)> {
        ours.iter()
            .filter_map(|c| f(c).map(|v| ((*c).to_owned(), v)))
            .collect()
    };
    let show = |v: &[(String, f64)], unit: &str| {
        v.iter()
            .map(|(k, r)| format!("{k} {r:.2}{unit}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let server = if fast {
        " — bench-peer (server cost out)"
    } else {
        " — fixture server"
    };
    let goal = format!("8 MiB result: our time ≤ 0.4× rmcp's{server}");
    match rmcp_t {
        Some(r) => {
            let v = per(&|c| warm(c).map(|s| s.median / r));
            verdicts.add(
                &goal,
                format!("{} (rmcp {r:.1} ms)", show(&v, "×")),
                Some(v.iter().all(|(_, x)| *x <= 0.4)),
            );
        }
        None => verdicts.add(&goal, "–".into(), None),
    }
    if let Some(r) = rmcp_cpu {
        let v = per(&|c| cpu(c).map(|s| s.median / r));
        verdicts.add(
            &format!("8 MiB result: host CPU time ÷ rmcp's (not a stated goal){server}"),
            format!("{} (rmcp {r:.2} ms)", show(&v, "×")),
            None,
        );
        if let Some(last) = verdicts.rows.last_mut() {
            last.2 = "reported".to_owned();
        }
    }
    if let (Some(r), Some(o)) = (rmcp_t, warm("rmcp-ours")) {
        // The same rmcp client code, its transport swapped (issue 13).
        verdicts.add(
            &format!("8 MiB result: rmcp over mcp-stdio ÷ rmcp's own transport{server}"),
            format!(
                "{:.2}× ({:.1} vs {r:.1} ms); host CPU {}",
                o.median / r,
                o.median,
                cpu("rmcp-ours")
                    .zip(rmcp_cpu)
                    .map_or("–".into(), |(c, rc)| format!("{:.2}×", c.median / rc))
            ),
            None,
        );
        if let Some(last) = verdicts.rows.last_mut() {
            last.2 = "reported".to_owned();
        }
    }
    if let Some(r) = rv_t {
        let v = per(&|c| warm(c).map(|s| s.median / r));
        verdicts.add(
            &format!("8 MiB result: our time ≤ 1.1× a framing + `&RawValue` reader{server}"),
            format!("{} (reader {r:.1} ms)", show(&v, "×")),
            Some(v.iter().all(|(_, x)| *x <= 1.1)),
        );
    }
    if !fast {
        let g: Vec<(String, f64)> = ours
            .iter()
            .filter_map(|c| growth_first.get(c).map(|m| ((*c).to_owned(), *m / 8.0)))
            .collect();
        verdicts.add(
            "8 MiB result: RSS growth ≤ 1.2× the payload (first call, fresh process)",
            format!(
                "{} of 8 MiB{}",
                show(&g, "×"),
                growth_first
                    .get("rmcp")
                    .map_or(String::new(), |m| format!("; rmcp {:.2}×", m / 8.0))
            ),
            (!g.is_empty()).then(|| g.iter().all(|(_, x)| *x <= 1.2)),
        );
    }
}

// ---------------------------------------------------------------- ping

/// `quiet`: the `ping-quiet` scenario (bench-peer: no stderr, answers inline).
fn ping_section(md: &mut String, results: &Results, verdicts: &mut Verdicts, quiet: bool) {
    let scenario = if quiet { "ping-quiet" } else { "ping" };
    if quiet {
        md.push_str(
            "### 3b. The same against a quiet server\n\n\
             `bench-peer` answers each ping inline on its one thread and writes nothing to \
             stderr.\n\n",
        );
    } else {
        let _ = write!(
            md,
            "## 3. Small round trips: {PINGS} sequential pings\n\n\
             `ping` to the fixture server, {PINGS} measured after {PING_WARMUP} unmeasured, 3 \
             fresh processes per client. Latency: request issued → response in hand. p50 and \
             p99 per process: median over the processes (min–max). The fixture answers each \
             request from a new thread and writes three log lines to stderr per request: our \
             clients read them (G1/G10: stderr is always drained); `rmcp` discards them \
             (`Stdio::null()`), `rmcp-lines` pipes them and reads them line by line.\n\n"
        );
    }
    md.push_str(
        "| client | p50, µs | p99, µs | p50 ÷ rmcp | p99 ÷ rmcp |\n|---|---|---|---|---|\n",
    );
    let per_proc = |client: &str, p: f64| -> Option<Summary> {
        let v: Vec<f64> = ok(results, scenario, client)
            .iter()
            .filter_map(|r| {
                let us: Vec<f64> = r.times_ns.iter().map(|&t| t as f64 / 1e3).collect();
                percentile(&us, p)
            })
            .collect();
        Summary::of(&v)
    };
    let rmcp50 = per_proc("rmcp", 50.0).map(|s| s.median);
    let rmcp99 = per_proc("rmcp", 99.0).map(|s| s.median);
    let mut summary = Vec::new();
    for (client, title) in [
        ("tokio", "ours, tokio"),
        ("async-std", "ours, async-std"),
        ("blocking", "ours, blocking"),
        ("rmcp", "rmcp, stderr discarded"),
        ("rmcp-lines", "rmcp, stderr read line by line"),
        ("rmcp-ours", "rmcp over mcp-stdio (`ClientTransport`)"),
        ("raw", "raw pipe (limit)"),
    ] {
        let (Some(p50), Some(p99)) = (per_proc(client, 50.0), per_proc(client, 99.0)) else {
            let f = failures(results, scenario, client);
            if !f.is_empty() {
                let _ = writeln!(md, "| {title} | failed: {} ||||", f.join("; "));
            }
            continue;
        };
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {} | {} |",
            p50.show(0),
            p99.show(0),
            rmcp50.map_or("–".into(), |r| ratio(p50.median, r)),
            rmcp99.map_or("–".into(), |r| ratio(p99.median, r)),
        );
        if matches!(client, "tokio" | "async-std" | "blocking") {
            summary.push(format!("{client} {:.0} / {:.0} µs", p50.median, p99.median));
        }
    }
    md.push('\n');
    let server = if quiet {
        "quiet bench-peer"
    } else {
        "fixture server"
    };
    verdicts.add(
        &format!("Ping p50 / p99, {server} (no numeric goal)"),
        format!(
            "{}; rmcp {} / {} µs",
            summary.join(", "),
            rmcp50.map_or("–".into(), |v| format!("{v:.0}")),
            rmcp99.map_or("–".into(), |v| format!("{v:.0}"))
        ),
        None,
    );
    if let Some(last) = verdicts.rows.last_mut() {
        last.2 = "reported".to_owned();
    }
    // Issue 11's goal for the async-std adapter, judged at p50 against rmcp
    // with its stderr discarded (against the fixture our clients also drain
    // the fixture's stderr, which rmcp does not; `rmcp-lines` shows that cost).
    let goal = format!("async-std ping p50 ≤ 1.1× rmcp, {server}");
    match (per_proc("async-std", 50.0), rmcp50) {
        (Some(a), Some(r)) => verdicts.add(
            &goal,
            format!("{:.2}× ({:.0} vs {:.0} µs)", a.median / r, a.median, r),
            Some(a.median <= 1.1 * r),
        ),
        _ => verdicts.add(&goal, "–".into(), None),
    }
}

// ---------------------------------------------------------------- guard

/// The guard's overhead: the tokio client against the quiet `bench-peer`,
/// direct and through `mcp-stdio guard` (processes of both kinds taking turns
/// in the same run).
fn guard_section(md: &mut String, results: &Results, verdicts: &mut Verdicts) {
    let _ = write!(
        md,
        "### 3c. Through `mcp-stdio guard`\n\n\
         The tokio client against the quiet `bench-peer`, direct and with `mcp-stdio guard \
         --max-frame {LARGE_LIMIT} -- bench-peer` in between (every byte crosses two more pipes \
         and the guard's framing both ways). Pings as in 3b; 8 MiB calls as in 2b (warm calls \
         pooled).\n\n\
         | path | ping p50, µs | ping p99, µs | 8 MiB warm call, ms | MB/s |\n|---|---|---|---|---|\n"
    );
    let ping = |client: &str, p: f64| -> Option<Summary> {
        let v: Vec<f64> = ok(results, "ping-quiet", client)
            .iter()
            .filter_map(|r| {
                let us: Vec<f64> = r.times_ns.iter().map(|&t| t as f64 / 1e3).collect();
                percentile(&us, p)
            })
            .collect();
        Summary::of(&v)
    };
    let large = |client: &str| -> Option<Summary> {
        let v: Vec<f64> = ok(results, "large-fast", client)
            .iter()
            .flat_map(|r| r.times_ns.iter().skip(1).map(|&t| ms(t)))
            .collect();
        Summary::of(&v)
    };
    let mb_s = |ms: f64| LARGE_BYTES as f64 / 1e6 / (ms / 1e3);
    for (client, title) in [("tokio", "direct"), ("tokio-guard", "through the guard")] {
        let cell = |s: Option<Summary>, digits| s.map_or("–".to_owned(), |s| s.show(digits));
        let l = large(client);
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {} | {} |",
            cell(ping(client, 50.0), 0),
            cell(ping(client, 99.0), 0),
            cell(l, 2),
            l.map_or("–".to_owned(), |s| format!("{:.0}", mb_s(s.median))),
        );
    }
    md.push('\n');
    let p50 = (ping("tokio", 50.0), ping("tokio-guard", 50.0));
    if let (Some(d), Some(g)) = p50 {
        let added = g.median - d.median;
        verdicts.add(
            "Guard overhead, ping p50 ≤ +30 µs",
            format!(
                "+{added:.0} µs ({:.0} vs {:.0} µs direct)",
                g.median, d.median
            ),
            Some(added <= 30.0),
        );
    }
    if let (Some(d), Some(g)) = (large("tokio"), large("tokio-guard")) {
        let r = d.median / g.median;
        verdicts.add(
            "Guard throughput, 8 MiB ≥ 0.8× direct",
            format!("{r:.2}× ({:.2} vs {:.2} ms per call)", g.median, d.median),
            Some(r >= 0.8),
        );
    }
}

// ---------------------------------------------------------------- flood

fn flood_section(md: &mut String, results: &Results, verdicts: &mut Verdicts) {
    let _ = write!(
        md,
        "## 4. stderr flood: 1 GiB\n\n\
         `tools/call stderr_flood {{bytes: {FLOOD_BYTES}}}`: the fixture writes 1 GiB to stderr \
         (64-byte lines), then answers. 2 fresh processes per client. Time: the call; RSS \
         growth: peak during the call minus before. Ours keep the default capture budget \
         (last 16 KiB) and line-forwarding queue (at most 64 lines of 2 KiB); rmcp exposes the \
         child's stderr only as a `ChildStderr` when piped, so the host reads it: line by line \
         with the lines dropped (a host that logs them), or all of it into a `Vec`.\n\n\
         | client | call, s | host CPU, s | RSS growth, MiB | stderr bytes seen by the host |\n\
         |---|---|---|---|---|\n"
    );
    let mut ours_growth = Vec::new();
    for (client, title) in [
        ("tokio", "ours, tokio (16 KiB budget)"),
        ("async-std", "ours, async-std (16 KiB budget)"),
        ("blocking", "ours, blocking (16 KiB budget)"),
        ("rmcp-lines", "rmcp, stderr read line by line"),
        ("rmcp-keep-all", "rmcp, stderr kept in full"),
    ] {
        let runs = ok(results, "flood", client);
        if runs.is_empty() {
            let f = failures(results, "flood", client);
            if !f.is_empty() {
                let _ = writeln!(md, "| {title} | failed: {} ||||", f.join("; "));
            }
            continue;
        }
        let t: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.times_ns.iter().map(|&t| t as f64 / 1e9))
            .collect();
        let g: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.growth.iter().map(|&g| g as f64))
            .collect();
        let cpu = cpu_seconds(&runs);
        let seen = runs
            .iter()
            .filter_map(|r| r.values.get("stderr_seen"))
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let gm: Vec<f64> = g.iter().map(|&x| mib(x)).collect();
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {} | {seen} |",
            Summary::of(&t).map_or("–".into(), |s| s.show(2)),
            Summary::of(&cpu).map_or("–".into(), |s| s.show(2)),
            Summary::of(&gm).map_or("–".into(), |s| s.show(2)),
        );
        if matches!(client, "tokio" | "async-std" | "blocking") {
            if let Some(max) = g.iter().copied().reduce(f64::max) {
                ours_growth.push((client, max));
            }
        }
    }
    md.push('\n');
    let bound = OUR_STDERR_BUDGET + SMALL_CONSTANT;
    verdicts.add(
        "stderr flood: our host within its budgets + a small constant",
        format!(
            "largest growth {} (bound: 16 KiB capture + 128 KiB line queue + 1 MiB = {:.2} MiB)",
            ours_growth
                .iter()
                .map(|(c, g)| format!("{c} {:.2} MiB", mib(*g)))
                .collect::<Vec<_>>()
                .join(", "),
            mib(bound)
        ),
        (!ours_growth.is_empty()).then(|| ours_growth.iter().all(|(_, g)| *g <= bound)),
    );
}

// ---------------------------------------------------------------- cancel

fn cancel_section(md: &mut String, results: &Results, verdicts: &mut Verdicts) {
    let _ = write!(
        md,
        "## 5. Cancel under load\n\n\
         An 8 MiB `big` call is started and cancelled (`notifications/cancelled`), and a \
         `ping` is sent at once. Time: cancel issued → ping response in hand. {CANCEL_TRIALS} \
         trials per process after {CANCEL_WARMUP} uncancelled calls, 2 fresh processes per \
         client, 20 ms of quiet between trials. Two moments:\n\n\
         - **in flight**: the cancel is issued once 1 MiB of the response has reached the \
           host (ours: the session's `stdout_bytes` counter; rmcp: a byte-counting reader \
           under its `AsyncRwTransport`, which is what `TokioChildProcess` wraps). The \
           fixture no longer suppresses a response it has begun writing, and the ping's \
           response queues behind the remaining ~7 MiB on the pipe: the host must take in \
           and drop the rest of the cancelled response before it can see the ping.\n\
         - **before the response**: the cancel follows the request at once (rmcp's: once \
           its request reached the pipe, see below), against `bench-peer`'s `slow_big`, \
           which works {CANCEL_WORK_MS} ms before it would answer (a sleep) and suppresses \
           the cancelled response; it answers the ping at once meanwhile. Against the \
           fixture this column measured the fixture: its `big` builds the result on one of \
           the two cores while the ping's thread waits for the other, so every client \
           (rmcp included) got either ~0.2 ms or 2–8 ms per trial and the medians were \
           chance. rmcp writes each message from a task of its own, so a cancel issued as \
           soon as `send_cancellable_request` returns usually reaches the pipe before its \
           request and the server ignores it (the fixture's log showed this in 10 of 12 \
           trials); its case therefore waits until the request's bytes are written (a \
           counting writer under its transport) before it starts the clock and cancels.\n\n\
         | client | in flight: cancel → ping, ms | ÷ rmcp | before the response: cancel → ping, ms | ÷ rmcp | late responses ignored |\n\
         |---|---|---|---|---|---|\n"
    );
    let lat = |scenario: &str, client: &str| -> Option<Summary> {
        let v: Vec<f64> = ok(results, scenario, client)
            .iter()
            .flat_map(|r| r.times_ns.iter().map(|&t| ms(t)))
            .collect();
        Summary::of(&v)
    };
    let rmcp_in = lat("cancel", "rmcp").map(|s| s.median);
    let rmcp_early = lat("cancel-early", "rmcp").map(|s| s.median);
    let mut summary = Vec::new();
    for (client, title) in [
        ("tokio", "ours, tokio"),
        ("async-std", "ours, async-std"),
        ("blocking", "ours, blocking"),
        ("rmcp", "rmcp"),
    ] {
        let inflight = lat("cancel", client);
        let early = lat("cancel-early", client);
        if inflight.is_none() && early.is_none() {
            let mut f = failures(results, "cancel", client);
            f.extend(failures(results, "cancel-early", client));
            if !f.is_empty() {
                let _ = writeln!(md, "| {title} | failed: {} |||||", f.join("; "));
            }
            continue;
        }
        let late: f64 = ok(results, "cancel", client)
            .iter()
            .chain(ok(results, "cancel-early", client).iter())
            .filter_map(|r| r.values.get("late_responses"))
            .sum();
        let show = |s: Option<Summary>| s.map_or("–".to_owned(), |s| s.show(2));
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {} | {} | {} |",
            show(inflight),
            inflight
                .zip(rmcp_in)
                .map_or("–".into(), |(s, r)| ratio(s.median, r)),
            show(early),
            early
                .zip(rmcp_early)
                .map_or("–".into(), |(s, r)| ratio(s.median, r)),
            if client == "rmcp" {
                "–".to_owned()
            } else {
                format!("{late:.0}")
            },
        );
        summary.push(format!(
            "{client} {} / {} ms",
            inflight.map_or("–".into(), |s| format!("{:.1}", s.median)),
            early.map_or("–".into(), |s| format!("{:.2}", s.median)),
        ));
    }
    md.push('\n');
    verdicts.add(
        "Cancel → ping, 8 MiB in flight / before the response (no numeric goal)",
        summary.join(", "),
        None,
    );
    if let Some(last) = verdicts.rows.last_mut() {
        last.2 = "reported".to_owned();
    }
    // Issue 11's goal: every adapter within 1.5× rmcp, cancel before the response.
    let early: Vec<(&str, f64)> = ["tokio", "async-std", "blocking"]
        .into_iter()
        .filter_map(|c| lat("cancel-early", c).map(|s| (c, s.median)))
        .collect();
    let goal = "Cancel → ping before the response ≤ 1.5× rmcp (every adapter)";
    match rmcp_early {
        Some(r) if !early.is_empty() => verdicts.add(
            goal,
            format!(
                "{}; rmcp {r:.2} ms",
                early
                    .iter()
                    .map(|(c, m)| format!("{c} {m:.2} ms ({:.2}×)", m / r))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(early.iter().all(|(_, m)| *m <= 1.5 * r)),
        ),
        _ => verdicts.add(goal, "–".into(), None),
    }
}

// ---------------------------------------------------------------- oversized

fn oversized_section(md: &mut String, results: &Results, verdicts: &mut Verdicts) {
    let _ = write!(
        md,
        "## 6. Oversized frame: one 512 MiB line, 4 MiB limit\n\n\
         `bench-peer` (bench/src/bin) answers `tools/call huge` with one response line of \
         exactly {OVERSIZED_LINE} bytes, streamed from a 1 MiB buffer (the fixture's \
         `big_exact` builds it in memory: 8 s and 1.5 GiB for this size). The host sends that \
         request and, 50 ms later (rmcp may otherwise write the later request first), a `ping`. \
         Recovered: the ping's response arrived. Time: huge request written → ping response. \
         Limit reported: when the framing first reported the line over the limit (ours: the \
         huge request fails then, with the wire-limit error; `LinesCodec`: the codec's \
         `MaxLineLengthExceeded`, which the host cannot tie to a request). Limit {OVERSIZED_LIMIT} bytes for ours, \
         `LinesCodec::new_with_max_length` and `rmcp-4mib`; rmcp's `TokioChildProcess` \
         keeps its default 16 MiB; `LinesCodec::new()` has none. Every case runs under \
         `ulimit -v` {cap} GiB and a 180 s deadline. 2 fresh processes per client.\n\n\
         | client | peak RSS growth, MiB | time to recover, s | host CPU, s | limit reported after, ms | \
         recovered | the huge request |\n|---|---|---|---|---|---|---|\n",
        cap = MEMORY_CAP_KIB / (1024 * 1024)
    );
    let mut ours = Vec::new();
    for (client, title) in [
        ("tokio", "ours, tokio"),
        ("async-std", "ours, async-std"),
        ("blocking", "ours, blocking"),
        ("lines-codec", "`LinesCodec`, 4 MiB"),
        ("lines-codec-unbounded", "`LinesCodec::new()`, no limit"),
        ("rmcp", "rmcp, default 16 MiB"),
        ("rmcp-4mib", "rmcp, `with_max_line_length(4 MiB)`"),
    ] {
        let runs = ok(results, "oversized", client);
        if runs.is_empty() {
            let f = failures(results, "oversized", client);
            if !f.is_empty() {
                let _ = writeln!(md, "| {title} | failed: {} ||||||", f.join("; "));
            }
            continue;
        }
        let g: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.growth.iter().map(|&g| mib(g as f64)))
            .collect();
        let t: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.times_ns.iter().map(|&t| t as f64 / 1e9))
            .collect();
        let err: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.values.get("error_after_ms").copied())
            .collect();
        let cpu = cpu_seconds(&runs);
        let rec = runs
            .iter()
            .filter(|r| r.values.get("recovered") == Some(&1.0))
            .count();
        let note = runs
            .iter()
            .flat_map(|r| r.notes.first())
            .next()
            .cloned()
            .unwrap_or_default();
        let gs = Summary::of(&g);
        let _ = writeln!(
            md,
            "| {title} | {} | {} | {} | {} | {rec}/{} | {note} |",
            gs.map_or("–".into(), |s| s.show(1)),
            Summary::of(&t).map_or("–".into(), |s| s.show(2)),
            Summary::of(&cpu).map_or("–".into(), |s| s.show(2)),
            Summary::of(&err).map_or("never".into(), |s| s.show(1)),
            runs.len(),
        );
        if matches!(client, "tokio" | "async-std" | "blocking") {
            if let Some(s) = gs {
                ours.push(format!("{client} {:.1} MiB", s.median));
            }
        }
    }
    md.push('\n');
    verdicts.add(
        "512 MiB line vs 4 MiB limit: peak RSS growth (no numeric goal)",
        ours.join(", "),
        None,
    );
    if let Some(last) = verdicts.rows.last_mut() {
        last.2 = "reported".to_owned();
    }
}

// ---------------------------------------------------------------- id last

/// Client, table title, headline name, limit.
const ID_LAST_CLIENTS: [(&str, &str, &str, &str); 9] = [
    ("tokio", "ours, tokio", "tokio", "1 MiB"),
    ("async-std", "ours, async-std", "async-std", "1 MiB"),
    ("blocking", "ours, blocking", "blocking", "1 MiB"),
    (
        "rmcp-1mib",
        "rmcp, `with_max_line_length(1 MiB)`",
        "rmcp (1 MiB)",
        "1 MiB",
    ),
    (
        "rmcp",
        "rmcp, `TokioChildProcess`",
        "rmcp (default)",
        "16 MiB (default)",
    ),
    (
        "lines-codec",
        "`LinesCodec::new_with_max_length`",
        "`LinesCodec` (1 MiB)",
        "1 MiB",
    ),
    (
        "ts-sdk",
        "TypeScript SDK",
        "TypeScript SDK (default)",
        "10 MiB (`maxBufferSize` default)",
    ),
    (
        "ts-sdk-1mib",
        "TypeScript SDK, `maxBufferSize`",
        "TypeScript SDK (1 MiB)",
        "1 MiB",
    ),
    ("py-sdk", "Python `mcp`", "Python `mcp`", "none"),
];

/// What a request got, for the table: the count and first detail of each
/// outcome, in the order error, closed, result, timeout.
fn id_last_outcomes(trials: &[&Trial]) -> String {
    let mut parts = Vec::new();
    for kind in ["error", "closed", "result", "timeout"] {
        let of_kind: Vec<&&Trial> = trials.iter().filter(|t| t.outcome == kind).collect();
        let Some(first) = of_kind.first() else {
            continue;
        };
        let d = &first.detail;
        let what = match kind {
            "error" => format!("an error: {d}"),
            "closed" => format!("never an error for its id: the whole connection closed ({d})"),
            "result" => format!("never an error: the oversized result delivered ({d})"),
            _ => format!("never an error: {d}"),
        };
        parts.push(format!("{}× {what}", of_kind.len()));
    }
    parts.join("; ")
}

fn id_last_section(md: &mut String, results: &Results, verdicts: &mut Verdicts) {
    let _ = write!(
        md,
        "## 7. Oversized response with its id last: frame end → the request's error\n\n\
         `bench-peer --stamps FILE` answers `tools/call id_last {{line_bytes}}` with one response \
         line of exactly that many bytes whose `id` member comes last, in the TypeScript SDK's \
         order: `{{\"result\":{{…}},\"jsonrpc\":\"2.0\",\"id\":N}}`, written from a 1 MiB buffer \
         (the server's cost out). The wire limit is {ID_LAST_LIMIT} bytes wherever a client has \
         one to set. Time: from the frame's end — `CLOCK_MONOTONIC` read by bench-peer just \
         after `write(2)` returned for the final newline, appended to FILE — to the moment the \
         client's request returns, read with the same clock in the client (Rust: \
         `clock_gettime`; node: `process.hrtime`; Python: `time.monotonic_ns`). Each request \
         waits at most {wait} s from sending; a client stops at its first request that gets no \
         answer in that time or loses the connection (the next ones would end alike). Up to \
         {ID_LAST_TRIALS} requests per process, {ID_LAST_PROCESSES} fresh processes per client. \
         \"Never\" is an outcome, not a time: a request that times out, or is handed the \
         oversized result, never got an error. The SDKs' rows show the time of what they did \
         deliver in the \"other outcome\" column. The TypeScript SDK's transport, once its read \
         buffer passes `maxBufferSize`, drops the buffer and closes the connection: the server \
         is stopped and every pending request fails with `Connection closed` when it exits \
         (here: once it has written the frame and seen its stdin end).\n\n",
        wait = ID_LAST_WAIT.as_secs()
    );
    for scenario in ID_LAST_SCENARIOS {
        let mut never = Vec::new();
        let line = cases::id_last_line(scenario).unwrap_or_default();
        let _ = write!(
            md,
            "### {line_mib} MiB response ({line} bytes), 1 MiB limit\n\n\
             | client | limit | frame end → error, ms | frame end → other outcome, ms | \
             request sent → frame end, ms | the request got |\n|---|---|---|---|---|---|\n",
            line_mib = line / (1024 * 1024)
        );
        let mut ours = Vec::new();
        let mut ours_met = true;
        for (client, title, short, limit) in ID_LAST_CLIENTS {
            let runs = ok(results, scenario, client);
            let fails = failures(results, scenario, client);
            if runs.is_empty() {
                if !fails.is_empty() {
                    let _ = writeln!(
                        md,
                        "| {title} | {limit} | failed: {} ||||",
                        fails.join("; ")
                    );
                }
                if matches!(client, "tokio" | "async-std" | "blocking") {
                    ours_met = false;
                }
                continue;
            }
            let trials: Vec<&Trial> = runs.iter().flat_map(|r| r.trials.iter()).collect();
            let times = |kinds: &[&str]| -> Option<Summary> {
                let v: Vec<f64> = trials
                    .iter()
                    .filter(|t| kinds.contains(&t.outcome.as_str()))
                    .filter_map(|t| t.after_end_ms)
                    .collect();
                Summary::of(&v)
            };
            let errors = times(&["error"]);
            let other = times(&["closed", "result"]);
            let errors_n = trials.iter().filter(|t| t.outcome == "error").count();
            let sent: Vec<f64> = trials.iter().filter_map(|t| t.end_after_sent_ms).collect();
            let _ = writeln!(
                md,
                "| {title} | {limit} | {} | {} | {} | {} |",
                match errors {
                    Some(s) if errors_n == trials.len() => s.show(3),
                    Some(s) => format!("{} ({errors_n} of {})", s.show(3), trials.len()),
                    None => "never".to_owned(),
                },
                other.map_or("–".to_owned(), |s| s.show(1)),
                Summary::of(&sent).map_or("–".to_owned(), |s| s.show(1)),
                id_last_outcomes(&trials),
            );
            if let Some(f) = fails.first() {
                let _ = writeln!(md, "| ↳ {} process(es) failed: {f} ||||||", fails.len());
            }
            if matches!(client, "tokio" | "async-std" | "blocking") {
                let limit_errors = trials
                    .iter()
                    .all(|t| t.outcome == "error" && t.detail.contains("wire limit"));
                match errors {
                    Some(s) if limit_errors && fails.is_empty() => {
                        ours_met &= s.median <= ID_LAST_GOAL_MS;
                        ours.push(format!("{client} {:.3} ms (max {:.3})", s.median, s.max));
                    }
                    _ => {
                        ours_met = false;
                        ours.push(format!(
                            "{client}: not every request got the wire-limit error"
                        ));
                    }
                }
            } else if errors_n == 0 {
                never.push(short);
            }
        }
        md.push('\n');
        verdicts.add(
            &format!(
                "Id-last oversized response ({} MiB, 1 MiB limit): frame end → the request's \
                 error ≤ {ID_LAST_GOAL_MS} ms",
                line / (1024 * 1024)
            ),
            if never.is_empty() {
                ours.join(", ")
            } else {
                format!("{}; never an error: {}", ours.join(", "), never.join("; "))
            },
            (!ours.is_empty()).then_some(ours_met),
        );
    }
}

// ---------------------------------------------------------------- document

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn lock_version(name: &str) -> String {
    let lock = std::fs::read_to_string(repo_root().join("Cargo.lock")).unwrap_or_default();
    let needle = format!("name = \"{name}\"\nversion = \"");
    lock.find(&needle)
        .and_then(|i| {
            let rest = &lock[i + needle.len()..];
            rest.find('"').map(|j| rest[..j].to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map_or("unknown CPU".to_owned(), |s| s.trim().to_owned());
    let nproc = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(String::new(), |kb| {
            format!(", {:.0} GiB RAM", kb / 1024.0 / 1024.0)
        });
    format!("{nproc} cores (`nproc`), {model}{mem}")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let opts = parse_opts(args)?;
    let peers = Peers::find();
    let load_start = loadavg();
    let started = Instant::now();
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let jobs = jobs(&opts, &peers);
    let results = run_jobs(&jobs);
    let framing = read_criterion(&opts.criterion);
    let load_end = loadavg();

    let mut body = String::new();
    let mut verdicts = Verdicts::default();
    framing_section(&mut body, &framing, &mut verdicts);
    large_section(&mut body, &results, &mut verdicts, false);
    large_section(&mut body, &results, &mut verdicts, true);
    ping_section(&mut body, &results, &mut verdicts, false);
    ping_section(&mut body, &results, &mut verdicts, true);
    guard_section(&mut body, &results, &mut verdicts);
    flood_section(&mut body, &results, &mut verdicts);
    cancel_section(&mut body, &results, &mut verdicts);
    oversized_section(&mut body, &results, &mut verdicts);
    id_last_section(&mut body, &results, &mut verdicts);

    let mut md = String::new();
    md.push_str(
        "# Benchmarks\n\n<!-- Written by `bash bench/run` (bench/src/report.rs); edit \
         bench/NOTES.md for the analysis, not this file. -->\n\n",
    );
    let _ = write!(
        md,
        "Run {date} on {} — load average {load_start} at the start, {load_end} at the end \
         (a shared machine: other work ran alongside). End-to-end cases took {:.0} s. Every \
         number is a median with its min–max; every ratio compares numbers of this one run.\n\n",
        machine(),
        started.elapsed().as_secs_f64()
    );
    md.push_str("## Headline\n\n| goal | result | verdict |\n|---|---|---|\n");
    for (goal, result, verdict) in &verdicts.rows {
        let _ = writeln!(md, "| {goal} | {result} | {verdict} |");
    }
    let _ = write!(
        md,
        "\nPeers: rmcp {}, tokio-util {} (`LinesCodec`), tokio {}, {}, {}; {}.\n\n",
        lock_version("rmcp"),
        lock_version("tokio-util"),
        lock_version("tokio"),
        peers
            .ts_sdk
            .as_ref()
            .and_then(|sdk| std::fs::read_to_string(sdk.join("package.json")).ok())
            .and_then(|p| serde_json::from_str::<serde_json::Value>(&p).ok())
            .and_then(|v| v["version"].as_str().map(|v| format!("@modelcontextprotocol/sdk {v}")))
            .map_or("TypeScript SDK not installed".to_owned(), |v| {
                format!("{v} on node {}", command_line("node", &["--version"]).unwrap_or_default())
            }),
        peers
            .python
            .as_ref()
            .and_then(|py| {
                command_line(
                    &py.display().to_string(),
                    &["-c", "import importlib.metadata as m, sys; print('mcp', m.version('mcp'), 'on Python', sys.version.split()[0])"],
                )
            })
            .unwrap_or_else(|| "Python mcp not installed".to_owned()),
        command_line("rustc", &["--version"]).unwrap_or_default(),
    );
    md.push_str(&body);
    if let Ok(notes) = std::fs::read_to_string(repo_root().join("bench/NOTES.md")) {
        md.push_str(&notes);
    }
    std::fs::write(&opts.out, md).map_err(|e| format!("write {}: {e}", opts.out.display()))?;
    eprintln!("bench: wrote {}", opts.out.display());
    Ok(())
}
