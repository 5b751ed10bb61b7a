//! `mcp-stdio-bench soak`: waves of concurrent sessions through every
//! adapter's `Client` and through `mcp-stdio guard`, against fixture servers
//! that misbehave in a seeded mix, with the invariants checked as it runs.
//! The run stops at the first breach (exit 1) and prints the seed, the wave,
//! the session and what broke; `--seed` replays it. SOAK.md has the method
//! and the last long run.

mod adapters;
mod guarded;
mod plan;
mod probe;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use mcp_stdio_core::CommandSpec;

use plan::{Ending, Host, Rng, SessionPlan, MAX_FRAME, STDERR_TAIL};
use probe::Snapshot;

/// Sessions per host kind and wave unless `--sessions` says otherwise.
const DEFAULT_SESSIONS: usize = 5;
/// How long descriptors, threads and processes get to return to their
/// baseline after a wave before the run fails.
const SETTLE_BOUND: Duration = Duration::from_secs(10);
/// RSS allowed per concurrent session: the framer's buffer and the result
/// handed to the application (one wire limit each), twice over for the
/// allocator's slack, plus the stderr tail and the queues.
const RSS_PER_SESSION: u64 = 4 * MAX_FRAME as u64 + STDERR_TAIL as u64 + 64 * 1024;
/// RSS allowed above the baseline whatever the sessions: runtimes' threads,
/// allocator arenas (up to 8 per core), code pages touched late.
const RSS_CONSTANT: u64 = 64 << 20;
/// How often the RSS monitor samples.
const RSS_SAMPLE: Duration = Duration::from_millis(50);

/// What one session saw.
#[derive(Debug, Default)]
pub(crate) struct SessionLog {
    pub(crate) endings: Vec<Ending>,
    /// Time of each ping after a cancel or a timeout (G8).
    pub(crate) probes: Vec<Duration>,
    pub(crate) shutdown: Option<Duration>,
    pub(crate) stderr_seen: u64,
    pub(crate) guard_exit: Option<i32>,
}

struct Args {
    duration: Duration,
    seed: u64,
    sessions: usize,
    report: Option<PathBuf>,
    /// `--wave W`: replay only wave W (no warm-up, no baseline checks).
    only_wave: Option<u64>,
    /// `--host NAME`: with `--wave`, only the sessions of this host kind.
    only_host: Option<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    // No --seed: one from the clock, printed at the start so the run replays.
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut out = Args {
        duration: Duration::from_secs(60),
        seed: clock ^ u64::from(std::process::id()),
        sessions: DEFAULT_SESSIONS,
        report: None,
        only_wave: None,
        only_host: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} needs a value"))?;
            v.parse().map_err(|_| format!("{name}: not a number: {v}"))
        };
        match arg.as_str() {
            "--minutes" => out.duration = Duration::from_secs(value(arg)? * 60),
            "--seconds" => out.duration = Duration::from_secs(value(arg)?),
            "--seed" => out.seed = value(arg)?,
            "--sessions" => {
                out.sessions = usize::try_from(value(arg)?)
                    .map_err(|e| e.to_string())?
                    .max(1)
            }
            "--report" => out.report = Some(it.next().ok_or("--report needs a file")?.into()),
            "--wave" => out.only_wave = Some(value(arg)?),
            "--host" => out.only_host = Some(it.next().ok_or("--host needs a name")?.clone()),
            other => return Err(format!("soak: unknown argument {other:?}")),
        }
    }
    Ok(out)
}

/// Counts of the whole run.
#[derive(Default)]
struct Totals {
    sessions: BTreeMap<&'static str, u64>,
    endings: BTreeMap<Ending, u64>,
    probes: u64,
    probe_max: Duration,
    shutdown_max: Duration,
    audit_logs: u64,
    audit_entries: u64,
    /// Logs of guards killed with SIGKILL that end without a seal (they verify).
    audit_unsealed: u64,
    stderr_seen: u64,
}

struct Checkpoint {
    wave: u64,
    sessions: usize,
    after: Snapshot,
    settle: Duration,
    wave_time: Duration,
}

fn fail(seed: u64, wave: u64, what: &str) -> ! {
    eprintln!("soak: BREACH (seed {seed}, wave {wave}): {what}");
    eprintln!("soak: replay with --seed {seed}");
    std::process::exit(1);
}

/// Runs the soak; see the module doc.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let args = parse(args)?;
    let dir = crate::cases::exe_dir();
    let fixture = dir.join("fixture-server");
    let guard = dir.join("mcp-stdio");
    for bin in [&fixture, &guard, &dir.join("fixture-helper")] {
        if !bin.is_file() {
            return Err(format!(
                "{} is missing: build the workspace's binaries first",
                bin.display()
            ));
        }
    }
    let audit_dir = std::env::temp_dir().join(format!("mcp-stdio-soak-{}", std::process::id()));
    std::fs::create_dir_all(&audit_dir).map_err(|e| format!("{}: {e}", audit_dir.display()))?;
    let seed = args.seed;
    eprintln!(
        "soak: seed {seed}, {:?}, {} sessions per host and wave",
        args.duration, args.sessions
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Idle blocking threads go fast, so the thread count settles between waves.
        .thread_keep_alive(Duration::from_millis(200))
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let mut totals = Totals::default();
    if let Some(wave) = args.only_wave {
        let only = args.only_host.as_deref();
        if let Err(e) = run_wave(
            &rt,
            seed,
            wave,
            args.sessions,
            &fixture,
            &guard,
            &audit_dir,
            &mut totals,
            only,
        ) {
            fail(seed, wave, &e);
        }
        eprintln!("soak: wave {wave} replayed: {:?}", totals.endings);
        let _ = std::fs::remove_dir_all(&audit_dir);
        return Ok(());
    }
    // Wave 0 warms up every host kind (runtimes, spawner threads, the pool);
    // its settled state is the baseline every later wave returns to.
    let warm = run_wave(
        &rt,
        seed,
        0,
        1,
        &fixture,
        &guard,
        &audit_dir,
        &mut totals,
        None,
    );
    if let Err(e) = warm {
        fail(seed, 0, &e);
    }
    thread::sleep(Duration::from_secs(2));
    let mut baseline = settle_baseline(&dir);
    let concurrent = (args.sessions * Host::ALL.len()) as u64;
    let rss_limit = baseline.rss + concurrent * RSS_PER_SESSION + RSS_CONSTANT;
    eprintln!(
        "soak: baseline: {} descriptors, {} threads, RSS {} MiB; RSS limit {} MiB",
        baseline.fds,
        baseline.threads,
        baseline.rss >> 20,
        rss_limit >> 20
    );
    let peak = Arc::new(AtomicU64::new(baseline.rss));
    let stop = Arc::new(AtomicBool::new(false));
    let wave_now = Arc::new(AtomicU64::new(1));
    let monitor = {
        let (peak, stop, wave_now) = (peak.clone(), stop.clone(), wave_now.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let rss = probe::rss();
                peak.fetch_max(rss, Ordering::Relaxed);
                if rss > rss_limit {
                    fail(
                        seed,
                        wave_now.load(Ordering::Relaxed),
                        &format!(
                            "host RSS {} MiB above the limit {} MiB",
                            rss >> 20,
                            rss_limit >> 20
                        ),
                    );
                }
                thread::sleep(RSS_SAMPLE);
            }
        })
    };
    // The monitor is a thread of its own: part of the baseline.
    baseline.threads = probe::threads();
    let start = Instant::now();
    let mut checkpoints = Vec::new();
    let mut wave = 1;
    while start.elapsed() < args.duration {
        wave_now.store(wave, Ordering::Relaxed);
        let began = Instant::now();
        if let Err(e) = run_wave(
            &rt,
            seed,
            wave,
            args.sessions,
            &fixture,
            &guard,
            &audit_dir,
            &mut totals,
            None,
        ) {
            fail(seed, wave, &e);
        }
        let wave_time = began.elapsed();
        let settled = Instant::now();
        let after = loop {
            let now = Snapshot::take(&dir);
            match now.excess(&baseline) {
                None => break now,
                Some(what) if settled.elapsed() > SETTLE_BOUND => fail(
                    seed,
                    wave,
                    &format!("not back to the baseline after {SETTLE_BOUND:?}: {what}"),
                ),
                Some(_) => thread::sleep(Duration::from_millis(50)),
            }
        };
        let settle = settled.elapsed();
        eprintln!(
            "soak: wave {wave} ({:.1} s): settled in {} ms; fds {} threads {} RSS {} MiB",
            wave_time.as_secs_f64(),
            settle.as_millis(),
            after.fds,
            after.threads,
            after.rss >> 20
        );
        checkpoints.push(Checkpoint {
            wave,
            sessions: args.sessions * Host::ALL.len(),
            after,
            settle,
            wave_time,
        });
        wave += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = monitor.join();
    let _ = std::fs::remove_dir_all(&audit_dir);
    let leftovers = probe::ours(&dir);
    if !leftovers.is_empty() {
        let list: Vec<String> = leftovers
            .iter()
            .map(|p| format!("{} {} ({})", p.pid, p.name, p.state))
            .collect();
        fail(
            seed,
            wave,
            &format!("processes left at the end: {}", list.join(", ")),
        );
    }
    let report = report(
        &args,
        start.elapsed(),
        &totals,
        &baseline,
        peak.load(Ordering::Relaxed),
        probe::hwm(),
        rss_limit,
        &checkpoints,
    );
    print!("{report}");
    if let Some(path) = &args.report {
        std::fs::write(path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The settled state after the warm-up wave (waits until no child is left).
fn settle_baseline(dir: &Path) -> Snapshot {
    let start = Instant::now();
    loop {
        let s = Snapshot::take(dir);
        if (s.children == 0 && s.ours == 0 && s.pool_in_use == 0) || start.elapsed() > SETTLE_BOUND
        {
            return s;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Runs one wave: `per_host` sessions of every host kind at once. Returns
/// at the first session that breaches.
#[allow(clippy::too_many_arguments)] // One call site; a struct would only rename them.
fn run_wave(
    rt: &tokio::runtime::Runtime,
    seed: u64,
    wave: u64,
    per_host: usize,
    fixture: &Path,
    guard: &Path,
    audit_dir: &Path,
    totals: &mut Totals,
    only_host: Option<&str>,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel::<(usize, SessionPlan, Result<SessionLog, String>)>();
    let mut index = 0;
    let mut audits = Vec::new();
    let mut started = 0;
    for host in Host::ALL {
        for _ in 0..per_host {
            let plan = SessionPlan::draw(&mut Rng::for_session(seed, wave, index as u64), host);
            if only_host.is_some_and(|h| h != host.name()) {
                index += 1;
                continue;
            }
            if only_host.is_some() {
                eprintln!("soak: session {index}: {plan:?}");
            }
            let mut spec = CommandSpec::new(fixture);
            spec.args(&plan.flags);
            let tx = tx.clone();
            match host {
                Host::Tokio => {
                    rt.spawn(async move {
                        let r = adapters::with_tokio::run(&plan, &spec).await;
                        let _ = tx.send((index, plan, r));
                    });
                }
                Host::AsyncStd => {
                    async_std::task::spawn(async move {
                        let r = adapters::with_async_std::run(&plan, &spec).await;
                        let _ = tx.send((index, plan, r));
                    });
                }
                Host::Blocking => {
                    thread::spawn(move || {
                        let r = adapters::run_blocking(&plan, &spec);
                        let _ = tx.send((index, plan, r));
                    });
                }
                Host::Guard => {
                    let audit = guarded::audit_path(audit_dir, wave, index);
                    audits.push((audit.clone(), plan.end == plan::End::Drop));
                    let (guard, fixture) = (guard.to_owned(), fixture.to_owned());
                    thread::spawn(move || {
                        let r = guarded::run(&plan, &guard, &fixture, &audit);
                        let _ = tx.send((index, plan, r));
                    });
                }
            }
            index += 1;
            started += 1;
        }
    }
    drop(tx);
    for _ in 0..started {
        let (i, plan, result) = rx
            .recv()
            .map_err(|_| "a session task ended without a result".to_owned())?;
        let log = result.map_err(|e| {
            format!(
                "session {i} ({}, flags {:?}, end {:?}): {e}\n  plan: {:?}",
                plan.host.name(),
                plan.flags,
                plan.end,
                plan.steps
            )
        })?;
        *totals.sessions.entry(plan.host.name()).or_default() += 1;
        for e in &log.endings {
            *totals.endings.entry(*e).or_default() += 1;
        }
        totals.probes += log.probes.len() as u64;
        if let Some(max) = log.probes.iter().max() {
            totals.probe_max = totals.probe_max.max(*max);
        }
        totals.shutdown_max = totals.shutdown_max.max(log.shutdown.unwrap_or_default());
        totals.stderr_seen += log.stderr_seen;
    }
    for (audit, killed) in audits {
        let (entries, sealed) = guarded::verify_audit(&audit, killed)?;
        totals.audit_entries += entries;
        totals.audit_logs += 1;
        totals.audit_unsealed += u64::from(!sealed);
        let _ = std::fs::remove_file(&audit);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // One call site: the report's inputs.
fn report(
    args: &Args,
    took: Duration,
    totals: &Totals,
    baseline: &Snapshot,
    peak_sampled: u64,
    hwm: u64,
    rss_limit: u64,
    checkpoints: &[Checkpoint],
) -> String {
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let mut s = String::new();
    let sessions: u64 = totals.sessions.values().sum();
    let _ = writeln!(
        s,
        "Seed **{}**, {:.0} s, {} waves of {} sessions ({} per host kind) after a warm-up wave.\n",
        args.seed,
        took.as_secs_f64(),
        checkpoints.len(),
        args.sessions * Host::ALL.len(),
        args.sessions
    );
    let _ = writeln!(s, "| host | sessions |\n| --- | ---: |");
    for (host, n) in &totals.sessions {
        let _ = writeln!(s, "| {host} | {n} |");
    }
    let _ = writeln!(s, "| **all** | **{sessions}** |\n");
    let _ = writeln!(s, "| request outcome | count |\n| --- | ---: |");
    let requests: u64 = totals.endings.values().sum();
    for e in Ending::ALL {
        let _ = writeln!(
            s,
            "| {} | {} |",
            e.name(),
            totals.endings.get(&e).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(s, "| **all** | **{requests}** |\n");
    let _ = writeln!(
        s,
        "- pings after a cancel, drop or timeout (G8): {}, slowest {} ms",
        totals.probes,
        totals.probe_max.as_millis()
    );
    let _ = writeln!(
        s,
        "- slowest shutdown: {} ms",
        totals.shutdown_max.as_millis()
    );
    let _ = writeln!(
        s,
        "- guard audit logs verified: {} ({} entries); {} sealed, {} unsealed (the guard killed with SIGKILL)",
        totals.audit_logs,
        totals.audit_entries,
        totals.audit_logs - totals.audit_unsealed,
        totals.audit_unsealed
    );
    let _ = writeln!(
        s,
        "- server stderr drained by the adapters' clients: {:.0} MiB",
        mib(totals.stderr_seen)
    );
    let _ = writeln!(
        s,
        "- host RSS: baseline {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB; limit {:.1} MiB \
        = baseline + {} sessions × {:.2} MiB + {:.0} MiB",
        mib(baseline.rss),
        mib(peak_sampled),
        mib(hwm),
        mib(rss_limit),
        args.sessions * Host::ALL.len(),
        mib(RSS_PER_SESSION),
        mib(RSS_CONSTANT)
    );
    let _ = writeln!(
        s,
        "- baseline: {} descriptors, {} threads, 0 child processes\n",
        baseline.fds, baseline.threads
    );
    let _ = writeln!(s, "| wave | sessions | wave time (s) | settle (ms) | fds | threads | children | zombies | our processes | RSS (MiB) | pool in use |");
    let _ = writeln!(
        s,
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for c in checkpoints {
        let a = &c.after;
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
            c.wave,
            c.sessions,
            c.wave_time.as_secs_f64(),
            c.settle.as_millis(),
            a.fds,
            a.threads,
            a.children,
            a.zombies.len(),
            a.ours,
            mib(a.rss),
            a.pool_in_use
        );
    }
    let _ = writeln!(s, "\nLeftover processes at the end: none.");
    s
}
