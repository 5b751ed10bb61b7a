//! `fixture-server`'s tool list flags (`--tool-description-suffix`,
//! `--extra-tool`, `--tools-list-reordered`, `--tools-page-size`) and its
//! `change_tools` tool: what the guard's pinned tool definitions are tested
//! against. See the doc comment of `fixture-server.rs`.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Value};

use super::{
    after_response, begin_response, id_key, lock, log, text_result, to_line, tools_list, Inflight,
    Outcome, Server,
};

/// Set by `change_tools`: echo's description has changed.
static TOOLS_CHANGED: AtomicBool = AtomicBool::new(false);

/// `change_tools`: echo's description changes from now on, and the client is told.
pub(crate) fn change_tools(server: &Server) -> Outcome {
    TOOLS_CHANGED.store(true, Ordering::SeqCst);
    let note = json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"});
    lock(&server.out).write_line(&to_line(&note));
    log("tools changed, notifications/tools/list_changed sent");
    Outcome::Result(text_result("tools changed"))
}

/// The tools/list answer: `tools_list()` with the tool list flags applied.
pub(crate) fn listed_tools(
    server: &Server,
    id: &Value,
    key: &str,
    entry: &Inflight,
    msg: &Value,
) -> Outcome {
    let opts = &server.opts;
    let mut list = tools_list();
    let mut tools = list["tools"].as_array().cloned().unwrap_or_default();
    let extra = |name: &str| {
        json!({"name":name,"description":"an extra tool",
        "inputSchema":{"type":"object","properties":{}}})
    };
    tools.push(
        json!({"name":"change_tools","description":"changes echo's description, then says so",
        "inputSchema":{"type":"object","properties":{}}}),
    );
    tools.extend(opts.extra_tools.iter().map(|n| extra(n)));
    let mut suffix = opts.description_suffix.clone().unwrap_or_default();
    if TOOLS_CHANGED.load(Ordering::SeqCst) {
        suffix.push_str(" (changed mid-session)");
    }
    if let Some(d) = tools[0].get_mut("description") {
        *d = json!(format!("{}{suffix}", d.as_str().unwrap_or_default()));
    }
    if let Some(size) = opts.tools_page_size {
        let from = msg
            .pointer("/params/cursor")
            .and_then(Value::as_str)
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0)
            .min(tools.len());
        let to = (from + size).min(tools.len());
        if to < tools.len() {
            list["nextCursor"] = json!(to.to_string());
        }
        tools = tools[from..to].to_vec();
    }
    list["tools"] = Value::Array(tools);
    if !opts.tools_reordered {
        return Outcome::Result(list);
    }
    let mut text = String::new();
    reversed_json(&list, &mut text);
    let line = format!(
        "{{ \"result\" : {text} , \"id\" : {} , \"jsonrpc\" : \"2.0\" }}",
        id_key(id)
    );
    let mut out = lock(&server.out);
    if begin_response(server, key, entry) {
        log(&format!("response {key} writing {} bytes", line.len()));
        out.write_line(line.as_bytes());
        log(&format!("response {key} written"));
        after_response(server, &mut out);
    }
    Outcome::Done
}

/// `v` as JSON with every object's keys in reverse order and spaces around `:` and `,`.
fn reversed_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push_str("{ ");
            for (i, (k, item)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                out.push_str(&to_text(&json!(k)));
                out.push_str(" : ");
                reversed_json(item, out);
            }
            out.push_str(" }");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(" , ");
                }
                reversed_json(item, out);
            }
            out.push_str(" ]");
        }
        other => out.push_str(&to_text(other)),
    }
}

fn to_text(v: &Value) -> String {
    serde_json::to_string(v).expect("a serde_json::Value always serializes")
}
