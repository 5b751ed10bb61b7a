//! `mcp-stdio top`: the running guards of this user, live, full screen
//! (ratatui). Every interval it asks each guard for its status (as `ps`
//! does); keys sort the rows, Enter shows a server's stderr tail, `q`
//! quits. Only this user's guards, through their status sockets.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::{DefaultTerminal, Frame};
use serde_json::Value;

use crate::fleet::{ask, ask_all, duration, mib, sockets, Asked};

/// Watch the running guards of this user, live.
#[derive(Debug, clap::Args)]
pub(crate) struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    interval: f64,
}

/// What the rows are sorted by (the key that chooses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    Cpu,
    Memory,
    Calls,
    Errors,
    Name,
}

impl Sort {
    fn label(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Calls => "calls",
            Self::Errors => "errors",
            Self::Name => "name",
        }
    }
}

/// One guard as shown.
struct Shown {
    status: Value,
    /// CPU use of its server's group since the last refresh, percent of one core.
    cpu_percent: Option<f64>,
}

struct Top {
    rows: Vec<Shown>,
    sort: Sort,
    table: TableState,
    /// The stderr tail shown instead of the table (Enter), and whose.
    logs: Option<(String, String)>,
    /// Each guard's CPU time at the last refresh, for the percentages.
    last_cpu: HashMap<u64, (u64, Instant)>,
    note: Option<String>,
}

pub(crate) fn top(args: &TopArgs) -> ExitCode {
    if !args.interval.is_finite() || args.interval < 0.1 {
        eprintln!("mcp-stdio top: --interval is at least 0.1 seconds");
        return ExitCode::from(2);
    }
    let interval = Duration::from_secs_f64(args.interval);
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mcp-stdio top: needs a terminal: {e} (`mcp-stdio ps` prints once)");
            return ExitCode::from(1);
        }
    };
    let mut top = Top {
        rows: Vec::new(),
        sort: Sort::Cpu,
        table: TableState::default().with_selected(Some(0)),
        logs: None,
        last_cpu: HashMap::new(),
        note: None,
    };
    let r = top.run(&mut terminal, interval);
    ratatui::restore();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcp-stdio top: {e}");
            ExitCode::from(1)
        }
    }
}

impl Top {
    fn run(&mut self, terminal: &mut DefaultTerminal, interval: Duration) -> std::io::Result<()> {
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                self.refresh();
                next = Instant::now() + interval;
            }
            terminal.draw(|f| self.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if !event::poll(wait)? {
                continue;
            }
            let Event::Key(key) = event::read()? else {
                continue;
            };
            if key.kind != KeyEventKind::Press {
                continue;
            }
            match (key.code, self.logs.is_some()) {
                (KeyCode::Char('q'), _) => return Ok(()),
                (KeyCode::Esc | KeyCode::Enter, true) => self.logs = None,
                (KeyCode::Esc, false) => return Ok(()),
                (KeyCode::Enter, false) => self.open_logs(),
                (KeyCode::Char('c'), _) => self.sort_by(Sort::Cpu),
                (KeyCode::Char('m'), _) => self.sort_by(Sort::Memory),
                (KeyCode::Char('n'), _) => self.sort_by(Sort::Calls),
                (KeyCode::Char('e'), _) => self.sort_by(Sort::Errors),
                (KeyCode::Char('a'), _) => self.sort_by(Sort::Name),
                (KeyCode::Down | KeyCode::Char('j'), false) => self.table.select_next(),
                (KeyCode::Up | KeyCode::Char('k'), false) => self.table.select_previous(),
                (KeyCode::Char('r'), _) => next = Instant::now(),
                _ => {}
            }
        }
    }

    /// Asks every guard for its status again.
    fn refresh(&mut self) {
        let sockets = match sockets() {
            Ok(s) => s,
            Err(e) => {
                self.note = Some(e);
                self.rows.clear();
                return;
            }
        };
        let now = Instant::now();
        let asked = ask_all(&sockets, r#"{"request":"status"}"#);
        let mut failed = 0;
        self.rows = asked
            .into_iter()
            .filter_map(|a| match a {
                Asked::Answer(v) => Some(v),
                Asked::Failed(_) => {
                    failed += 1;
                    None
                }
                Asked::Gone => None,
            })
            .map(|status| {
                let pid = status["guard_pid"].as_u64().unwrap_or(0);
                let cpu = status.pointer("/process/cpu_ms").and_then(Value::as_u64);
                let cpu_percent = match (cpu, self.last_cpu.get(&pid)) {
                    (Some(c), Some(&(before, at))) => {
                        let wall = now.duration_since(at).as_secs_f64() * 1e3;
                        (wall > 0.0).then(|| c.saturating_sub(before) as f64 * 100.0 / wall)
                    }
                    _ => None,
                };
                if let Some(c) = cpu {
                    self.last_cpu.insert(pid, (c, now));
                }
                Shown {
                    status,
                    cpu_percent,
                }
            })
            .collect();
        self.note = (failed > 0).then(|| format!("{failed} guard(s) did not answer"));
        self.order();
    }

    fn sort_by(&mut self, sort: Sort) {
        self.sort = sort;
        self.order();
    }

    fn order(&mut self) {
        let n = |s: &Shown, p: &str| s.status.pointer(p).and_then(Value::as_u64).unwrap_or(0);
        let errors = |s: &Shown| n(s, "/requests/error") + n(s, "/requests/failed");
        let name = |s: &Shown| s.status["name"].as_str().unwrap_or("").to_owned();
        match self.sort {
            Sort::Cpu => self.rows.sort_by(|a, b| {
                b.cpu_percent
                    .unwrap_or(0.0)
                    .total_cmp(&a.cpu_percent.unwrap_or(0.0))
                    .then_with(|| n(b, "/process/cpu_ms").cmp(&n(a, "/process/cpu_ms")))
            }),
            Sort::Memory => self
                .rows
                .sort_by_key(|s| std::cmp::Reverse(n(s, "/process/rss_bytes"))),
            Sort::Calls => self
                .rows
                .sort_by_key(|s| std::cmp::Reverse(n(s, "/requests/total"))),
            Sort::Errors => self.rows.sort_by_key(|s| std::cmp::Reverse(errors(s))),
            Sort::Name => self.rows.sort_by_key(name),
        }
    }

    fn open_logs(&mut self) {
        let Some(row) = self.table.selected().and_then(|i| self.rows.get(i)) else {
            return;
        };
        let name = row.status["name"].as_str().unwrap_or("?").to_owned();
        let pid = row.status["guard_pid"].as_u64().unwrap_or(0);
        let text = match sockets() {
            Ok(all) => match all.iter().find(|s| u64::from(s.pid) == pid) {
                Some(s) => match ask(&s.path, r#"{"request":"logs"}"#) {
                    Asked::Answer(v) => v["stderr"].as_str().unwrap_or_default().to_owned(),
                    Asked::Gone => "the guard has exited".to_owned(),
                    Asked::Failed(why) => why,
                },
                None => "the guard has exited".to_owned(),
            },
            Err(e) => e,
        };
        self.logs = Some((format!("{name} (guard {pid}): stderr"), text));
    }

    fn draw(&mut self, frame: &mut Frame<'_>) {
        let [head, body] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(frame.area());
        let title = format!(
            "mcp-stdio top: {} guard(s), sorted by {} | c m n e a: sort  Enter: stderr  q: quit{}",
            self.rows.len(),
            self.sort.label(),
            self.note
                .as_deref()
                .map(|n| format!("  ({n})"))
                .unwrap_or_default()
        );
        frame.render_widget(Line::from(title), head);
        if let Some((title, text)) = &self.logs {
            let height = usize::from(body.height.saturating_sub(2));
            let lines: Vec<&str> = text.lines().collect();
            let shown = lines[lines.len().saturating_sub(height)..].join("\n");
            let block = Block::bordered().title(format!("{title}  (Esc: back)"));
            frame.render_widget(Paragraph::new(shown).block(block), body);
            return;
        }
        let header = Row::new([
            "NAME", "GUARD", "STATE", "UP", "CALLS", "ERR", "P99", "RSS", "CPU%", "RESTARTS",
            "HOST",
        ])
        .style(Style::new().add_modifier(Modifier::BOLD));
        let now_ms = crate::fleet::now_ms();
        let rows = self.rows.iter().map(|s| {
            let v = &s.status;
            let n = |p: &str| v.pointer(p).and_then(Value::as_u64);
            let p99 = v["latency"]
                .as_array()
                .and_then(|l| l.first())
                .map_or("-".to_owned(), |l| match l["p99_ms"].as_u64() {
                    Some(ms) => format!("≤{ms}ms"),
                    None => ">60s".to_owned(),
                });
            Row::new([
                v["name"].as_str().unwrap_or("?").to_owned(),
                n("/guard_pid").map_or("-".into(), |p| p.to_string()),
                v["state"].as_str().unwrap_or("?").to_owned(),
                n("/started_unix_ms").map_or("-".into(), |t| duration(now_ms.saturating_sub(t))),
                n("/requests/total").unwrap_or(0).to_string(),
                (n("/requests/error").unwrap_or(0) + n("/requests/failed").unwrap_or(0))
                    .to_string(),
                p99,
                n("/process/rss_bytes").map_or("-".into(), mib),
                s.cpu_percent.map_or("-".into(), |c| format!("{c:.1}")),
                n("/restarts").unwrap_or(0).to_string(),
                v["host_program"].as_str().unwrap_or("-").to_owned(),
            ])
        });
        let widths = [
            Constraint::Min(12),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Min(8),
        ];
        let table = Table::new(rows, widths)
            .header(header)
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
            .block(Block::bordered());
        frame.render_stateful_widget(table, body, &mut self.table);
    }
}
