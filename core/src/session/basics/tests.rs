use serde_json::json;

use super::*;
use crate::session::handshake::{LATEST_HANDSHAKE_VERSION, META_CLIENT_INFO};
use crate::wire::message::Id;

fn request(method: &str, params: Option<Value>) -> Request {
    Request {
        id: Id::Number(1),
        method: method.to_owned(),
        params: params.map(|p| to_raw(&p).unwrap()),
    }
}

fn answer(router: &mut BasicsRouter, method: &str, params: Option<Value>) -> Value {
    match router.route(&request(method, params)).0 {
        Route::Answer(Ok(v)) => serde_json::from_str(v.get()).unwrap(),
        Route::Answer(Err(e)) => json!({"error": e.code, "message": e.message}),
        Route::Handler => json!("handler"),
    }
}

fn init(version: &str) -> Option<Value> {
    Some(
        json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
    )
}

fn one_tool() -> ServerBasics {
    let mut b = ServerBasics::default();
    b.server_info("echo-server", "1.2.3")
        .unwrap()
        .instructions("say hi")
        .unwrap()
        .tool(&json!({"name": "echo", "inputSchema": {"type": "object"}}))
        .unwrap();
    b
}

#[test]
fn initialize_negotiation_table() {
    // (asked, answered): supported versions are echoed, anything else gets the latest handshake version.
    let mut table: Vec<(&str, &str)> = SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .map(|v| (*v, *v))
        .collect();
    table.push(("2023-01-01", LATEST_HANDSHAKE_VERSION));
    table.push(("2099-12-31", LATEST_HANDSHAKE_VERSION));
    table.push(("", LATEST_HANDSHAKE_VERSION));
    for (asked, answered) in table {
        let mut r = BasicsRouter::new(one_tool());
        let v = answer(&mut r, "initialize", init(asked));
        assert_eq!(v["protocolVersion"], answered, "asked {asked:?}: {v}");
        assert_eq!(
            v["serverInfo"],
            json!({"name": "echo-server", "version": "1.2.3"})
        );
        assert_eq!(v["instructions"], "say hi");
        // Tools given: `tools` is declared even though the capabilities did not say so.
        assert_eq!(v["capabilities"], json!({"tools": {}}));
        assert_eq!(r.protocol_version(), Some(answered));
        let client = r.client().expect("the client's hello is kept");
        assert_eq!(client.client_info, Some(Implementation::new("c", "1")));
        assert_eq!(client.capabilities.as_ref().map(|c| c.get()), Some("{}"));
    }
}

#[test]
fn a_malformed_or_oversized_client_hello_does_not_fail_the_handshake() {
    for params in [
        json!({"protocolVersion": "2025-06-18"}),
        json!({"protocolVersion": "2025-06-18", "clientInfo": 5, "capabilities": []}),
        json!({"protocolVersion": "2025-06-18", "clientInfo": {"name": "n"}}),
        json!({"protocolVersion": "2025-06-18",
               "clientInfo": {"name": "n".repeat(MAX_SERVER_INFO_BYTES), "version": "1"},
               "capabilities": {"x": "y".repeat(MAX_CAPABILITIES_BYTES)}}),
    ] {
        let mut r = BasicsRouter::new(ServerBasics::default());
        let v = answer(&mut r, "initialize", Some(params.clone()));
        assert_eq!(v["protocolVersion"], "2025-06-18", "{params}");
        let client = r.client().expect("kept");
        assert_eq!(client.client_info, None, "{params}");
        assert!(client.capabilities.is_none(), "{params}");
    }
    let mut r = BasicsRouter::new(ServerBasics::default());
    let _ = answer(
        &mut r,
        "initialize",
        Some(json!({"protocolVersion": "2025-06-18",
        "clientInfo": {"name": "host", "version": "2", "title": "Host"},
        "capabilities": {"sampling": {}}})),
    );
    let client = r.client().unwrap();
    assert_eq!(client.client_info, Some(Implementation::new("host", "2")));
    assert_eq!(
        client.capabilities.as_ref().unwrap().get(),
        r#"{"sampling":{}}"#
    );
}

#[test]
fn initialize_without_a_protocol_version_is_invalid_params() {
    for params in [
        None,
        Some(json!({})),
        Some(json!({"protocolVersion": 20250618})),
        Some(json!([1, 2])),
    ] {
        let mut r = BasicsRouter::new(ServerBasics::default());
        let v = answer(&mut r, "initialize", params.clone());
        assert_eq!(v["error"], INVALID_PARAMS, "{params:?}: {v}");
        assert_eq!(r.protocol_version(), None);
        // A good retry still works.
        let v = answer(&mut r, "initialize", init("2025-06-18"));
        assert_eq!(v["protocolVersion"], "2025-06-18");
        assert_eq!(r.metrics().initialize_refused, 1);
    }
}

#[test]
fn a_second_initialize_is_refused_and_keeps_the_first_version() {
    let mut r = BasicsRouter::new(ServerBasics::default());
    assert_eq!(
        answer(&mut r, "initialize", init("2025-03-26"))["protocolVersion"],
        "2025-03-26"
    );
    let v = answer(&mut r, "initialize", init("2025-11-25"));
    assert_eq!(v["error"], INVALID_REQUEST, "{v}");
    assert!(v["message"].as_str().unwrap().contains("2025-03-26"), "{v}");
    assert_eq!(r.protocol_version(), Some("2025-03-26"));
}

#[test]
fn ping_is_an_empty_object_before_and_after_initialize() {
    let mut r = BasicsRouter::new(ServerBasics::default());
    assert_eq!(answer(&mut r, "ping", None), json!({}));
    let _ = answer(&mut r, "initialize", init("2025-06-18"));
    assert_eq!(answer(&mut r, "ping", Some(json!({}))), json!({}));
    assert_eq!(r.metrics().requests_before_initialize, 0);
    assert_eq!(r.metrics().answered, 3);
}

#[test]
fn method_not_found_for_what_the_capabilities_do_not_declare() {
    let mut b = ServerBasics::default();
    b.capabilities(&json!({"resources": {}, "logging": {}}))
        .unwrap()
        .method("x/custom")
        .unwrap();
    let mut r = BasicsRouter::new(b);
    for (method, expect) in [
        ("resources/list", json!("handler")),
        ("resources/templates/list", json!("handler")),
        ("logging/setLevel", json!("handler")),
        ("x/custom", json!("handler")),
        ("tools/list", json!(METHOD_NOT_FOUND)),
        ("tools/call", json!(METHOD_NOT_FOUND)),
        ("prompts/get", json!(METHOD_NOT_FOUND)),
        ("completion/complete", json!(METHOD_NOT_FOUND)),
        ("no/such", json!(METHOD_NOT_FOUND)),
    ] {
        let v = answer(&mut r, method, None);
        let got = if v == json!("handler") {
            v
        } else {
            v["error"].clone()
        };
        assert_eq!(got, expect, "{method}");
    }
    assert_eq!(r.metrics().method_not_found, 5);
    // Served before initialize, and counted.
    assert_eq!(r.metrics().requests_before_initialize, 9);
}

#[test]
fn every_capability_maps_to_its_methods() {
    let mut b = ServerBasics::default();
    b.capabilities(&json!({"tools": {}, "prompts": {}, "completions": {}}))
        .unwrap();
    for m in [
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "initialize",
        "ping",
    ] {
        assert!(b.serves(m), "{m}");
    }
    for m in [
        "resources/read",
        "logging/setLevel",
        "tools/other",
        "toolsx/list",
    ] {
        assert!(!b.serves(m), "{m}");
    }
    assert!(ServerBasics::passthrough().serves("anything/at/all"));
}

#[test]
fn the_core_answers_tools_list_and_refuses_unknown_tools() {
    let mut b = one_tool();
    b.tool(&json!({"name": "slow", "description": "d", "inputSchema": {"type": "object"}}))
        .unwrap();
    let mut r = BasicsRouter::new(b);
    let v = answer(&mut r, "tools/list", None);
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "slow"]);
    assert_eq!(v["tools"][1]["description"], "d");
    let call = |name: Value| Some(json!({"name": name, "arguments": {}}));
    assert_eq!(
        answer(&mut r, "tools/call", call(json!("echo"))),
        json!("handler")
    );
    assert_eq!(
        answer(&mut r, "tools/call", call(json!("nope")))["error"],
        INVALID_PARAMS
    );
    assert_eq!(
        answer(&mut r, "tools/call", call(json!(7)))["error"],
        INVALID_PARAMS
    );
    assert_eq!(answer(&mut r, "tools/call", None)["error"], INVALID_PARAMS);
    assert_eq!(r.metrics().unknown_tools, 3);
}

#[test]
fn declared_tools_without_a_list_go_to_the_handler() {
    let mut b = ServerBasics::default();
    b.capabilities(&json!({"tools": {"listChanged": true}}))
        .unwrap();
    let mut r = BasicsRouter::new(b);
    assert_eq!(answer(&mut r, "tools/list", None), json!("handler"));
    assert_eq!(answer(&mut r, "tools/call", None), json!("handler"));
    let v = answer(&mut r, "initialize", init("2025-06-18"));
    assert_eq!(v["capabilities"], json!({"tools": {"listChanged": true}}));
    assert!(v.get("instructions").is_none(), "{v}");
    assert_eq!(v["serverInfo"]["name"], "mcp-stdio");
}

#[test]
fn the_way_out_sends_every_request_to_the_handler() {
    let mut r = BasicsRouter::new(ServerBasics::passthrough());
    for m in ["initialize", "ping", "tools/list", "no/such"] {
        assert_eq!(
            answer(&mut r, m, init("2025-06-18")),
            json!("handler"),
            "{m}"
        );
    }
    let mut b = one_tool();
    b.answer_basics(false);
    let mut r = BasicsRouter::new(b);
    assert_eq!(answer(&mut r, "tools/call", None), json!("handler"));
    assert_eq!(r.metrics(), &BasicsMetrics::default());
    assert_eq!(r.protocol_version(), None);
}

#[test]
fn setters_refuse_bad_or_oversized_values_and_change_nothing() {
    let mut b = ServerBasics::default();
    assert_eq!(
        b.capabilities(&json!([1])).unwrap_err(),
        BasicsError::CapabilitiesNotObject
    );
    assert!(matches!(
        b.capabilities(&json!({"x": "y".repeat(MAX_CAPABILITIES_BYTES)})),
        Err(BasicsError::TooLarge { .. })
    ));
    assert!(matches!(
        b.instructions("i".repeat(MAX_INSTRUCTIONS_BYTES + 1)),
        Err(BasicsError::TooLarge { .. })
    ));
    assert!(matches!(
        b.server_info("n".repeat(MAX_SERVER_INFO_BYTES), "1"),
        Err(BasicsError::TooLarge { .. })
    ));
    for bad in [
        json!("echo"),
        json!({"name": "echo"}),
        json!({"name": "", "inputSchema": {}}),
        json!({"name": "n".repeat(MAX_TOOL_NAME_BYTES + 1), "inputSchema": {}}),
        json!({"name": 1, "inputSchema": {}}),
    ] {
        assert!(
            matches!(b.tool(&bad), Err(BasicsError::InvalidTool(_))),
            "{bad}"
        );
    }
    b.tool(&json!({"name": "a", "inputSchema": {}})).unwrap();
    assert_eq!(
        b.tool(&json!({"name": "a", "inputSchema": {}}))
            .unwrap_err(),
        BasicsError::DuplicateTool("a".into())
    );
    let big = json!({"name": "big", "inputSchema": {"d": "x".repeat(MAX_TOOL_LIST_BYTES)}});
    assert!(matches!(b.tool(&big), Err(BasicsError::TooLarge { .. })));
    assert_eq!(b.get_tool_names().collect::<Vec<_>>(), ["a"]);
    for i in 1..MAX_TOOLS {
        b.tool(&json!({"name": format!("t{i}"), "inputSchema": {}}))
            .unwrap();
    }
    assert!(matches!(
        b.tool(&json!({"name": "one-more", "inputSchema": {}})),
        Err(BasicsError::TooMany { .. })
    ));
    assert!(matches!(b.method(""), Err(BasicsError::InvalidMethod(_))));
    assert!(matches!(
        b.method("m".repeat(MAX_METHOD_NAME_BYTES + 1)),
        Err(BasicsError::InvalidMethod(_))
    ));
    for i in 0..MAX_EXTRA_METHODS {
        b.method(format!("m{i}")).unwrap();
    }
    b.method("m0").unwrap();
    assert!(matches!(
        b.method("m-new"),
        Err(BasicsError::TooMany { .. })
    ));
    assert!(b.get_capabilities().is_empty());
    assert_eq!(b.get_instructions(), None);
    assert_eq!(b.get_server_info(), &Implementation::default());
}

#[test]
fn largest_answer_bounds_the_real_answers() {
    let mut b = one_tool();
    b.capabilities(&json!({"logging": {}, "experimental": {"x": [1, 2, 3]}}))
        .unwrap()
        .instructions("é\"quoted\"\n".repeat(100))
        .unwrap();
    for i in 0..50 {
        b.tool(&json!({"name": format!("t{i}"), "inputSchema": {"type": "object"}}))
            .unwrap();
    }
    let bound = b.largest_answer();
    let mut r = BasicsRouter::new(b);
    for (m, p) in [
        ("initialize", init("2025-06-18")),
        ("tools/list", None),
        ("server/discover", modern(json!({}))),
        ("tools/list", modern(json!({}))),
    ] {
        let (Route::Answer(Ok(v)), rev) = r.route(&request(m, p)) else {
            panic!("{m} not answered")
        };
        let v = if rev.is_modern() {
            modern_result(&v, CACHEABLE_METHODS.contains(&m)).unwrap_or(v)
        } else {
            v
        };
        assert!(v.get().len() <= bound, "{m}: {} > {bound}", v.get().len());
    }
}

// ---- the 2026-07-28 revision ----

/// `params` with a modern `_meta` (version, capabilities, info) added.
fn modern(mut params: Value) -> Option<Value> {
    params["_meta"] = json!({
        META_PROTOCOL_VERSION: "2026-07-28",
        META_CLIENT_CAPABILITIES: {"elicitation": {}},
        META_CLIENT_INFO: {"name": "modern-client", "version": "9"},
        "progressToken": 7,
    });
    Some(params)
}

fn with_meta(meta: Value) -> Option<Value> {
    Some(json!({"_meta": meta}))
}

/// What a request came to: `handler@VERSION`, `answer@VERSION` or the error code.
fn outcome(r: &mut BasicsRouter, method: &str, params: Option<Value>) -> String {
    let (route, rev) = r.route(&request(method, params));
    let v = rev.version.unwrap_or("none");
    match route {
        Route::Handler => format!("handler@{v}"),
        Route::Answer(Ok(_)) => format!("answer@{v}"),
        Route::Answer(Err(e)) => e.code.to_string(),
    }
}

#[test]
fn revision_table_per_session_and_per_request() {
    let m26 = |method_params: Value| modern(method_params);
    let no_caps = with_meta(json!({META_PROTOCOL_VERSION: "2026-07-28"}));
    let old_meta = with_meta(json!({META_PROTOCOL_VERSION: "2025-06-18"}));
    let unknown =
        with_meta(json!({META_PROTOCOL_VERSION: "2099-01-01", META_CLIENT_CAPABILITIES: {}}));
    let echo = json!({"name": "echo", "arguments": {}});
    // (session name, steps: (method, params, expected outcome))
    type Step = (&'static str, Option<Value>, &'static str);
    let sessions: Vec<(&str, Vec<Step>)> = vec![
        (
            "legacy: initialize 2025-11-25, then as today",
            vec![
                ("tools/list", None, "answer@none"),
                ("ping", None, "answer@none"),
                ("initialize", init("2025-11-25"), "answer@none"),
                ("tools/list", None, "answer@2025-11-25"),
                ("tools/call", Some(echo.clone()), "handler@2025-11-25"),
                ("ping", None, "answer@2025-11-25"),
                // A request of a legacy session may still name its own revision.
                ("tools/list", m26(json!({})), "answer@2026-07-28"),
                ("ping", m26(json!({})), "-32601"),
                ("tools/list", unknown.clone(), "-32022"),
                ("server/discover", None, "answer@2025-11-25"),
            ],
        ),
        (
            "initialize asking 2026-07-28: the session is modern",
            vec![
                ("initialize", init("2026-07-28"), "answer@none"),
                // No `_meta` needed: the session carries the context.
                ("tools/list", None, "answer@2026-07-28"),
                ("tools/call", Some(echo.clone()), "handler@2026-07-28"),
                ("ping", None, "-32601"),
                ("logging/setLevel", Some(json!({"level": "info"})), "-32601"),
            ],
        ),
        (
            "discover first: every request must say its revision",
            vec![
                ("server/discover", None, "answer@2026-07-28"),
                ("tools/list", None, "-32602"),
                ("tools/list", no_caps.clone(), "-32602"),
                ("tools/list", m26(json!({})), "answer@2026-07-28"),
                ("tools/call", m26(echo.clone()), "handler@2026-07-28"),
                (
                    "tools/call",
                    old_meta.clone().map(|mut p| {
                        p["name"] = json!("echo");
                        p
                    }),
                    "handler@2025-06-18",
                ),
                ("ping", m26(json!({})), "-32601"),
                ("ping", None, "-32602"),
                ("tools/list", unknown.clone(), "-32022"),
                // A late initialize (a client falling back) is still answered.
                ("initialize", init("2025-11-25"), "answer@none"),
                ("tools/list", None, "answer@2025-11-25"),
            ],
        ),
        (
            "a modern request first: the same",
            vec![
                ("tools/call", m26(echo.clone()), "handler@2026-07-28"),
                ("tools/list", None, "-32602"),
                ("server/discover", m26(json!({})), "answer@2026-07-28"),
            ],
        ),
        (
            "refusals before anything: the session stays legacy",
            vec![
                ("tools/list", unknown.clone(), "-32022"),
                ("tools/list", no_caps.clone(), "-32602"),
                ("tools/list", with_meta(json!(5)), "-32602"),
                (
                    "tools/list",
                    with_meta(json!({META_PROTOCOL_VERSION: 2026})),
                    "-32602",
                ),
                ("server/discover", unknown.clone(), "-32022"),
                // A handshake version in `_meta` needs no other key.
                ("tools/list", old_meta.clone(), "answer@2025-06-18"),
                // `_meta` without a version says nothing of the revision.
                (
                    "tools/list",
                    with_meta(json!({"progressToken": 1})),
                    "answer@none",
                ),
                ("tools/list", None, "answer@none"),
            ],
        ),
    ];
    for (name, steps) in sessions {
        let mut r = BasicsRouter::new(one_tool());
        for (i, (method, params, want)) in steps.into_iter().enumerate() {
            let got = outcome(&mut r, method, params.clone());
            assert_eq!(got, want, "{name}: step {i}: {method} {params:?}");
        }
    }
}

#[test]
fn discover_is_answered_in_the_2026_shape_even_with_basics_only() {
    let mut r = BasicsRouter::new(one_tool());
    let v = answer(&mut r, "server/discover", modern(json!({})));
    assert_eq!(
        v,
        json!({
            "resultType": "complete",
            "supportedVersions": SUPPORTED_PROTOCOL_VERSIONS,
            "capabilities": {"tools": {}},
            "instructions": "say hi",
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {META_SERVER_INFO: {"name": "echo-server", "version": "1.2.3"}},
        })
    );
    // A server that declares nothing still answers it; no instructions, no key.
    let mut r = BasicsRouter::new(ServerBasics::default());
    let v = answer(&mut r, "server/discover", None);
    assert_eq!(v["capabilities"], json!({}));
    assert!(v.get("instructions").is_none(), "{v}");
    assert_eq!(v["_meta"][META_SERVER_INFO]["name"], "mcp-stdio");
    assert_eq!(r.metrics().discovers_answered, 1);
    assert_eq!(r.metrics().requests_before_initialize, 0);
    assert!(r.began_modern());
}

#[test]
fn unsupported_version_names_the_versions_spoken_and_bounds_the_echo() {
    let mut r = BasicsRouter::new(one_tool());
    let long = "é".repeat(MAX_ECHOED_VERSION_BYTES);
    for (asked, echoed) in [
        ("2099-01-01".to_owned(), "2099-01-01".to_owned()),
        (long.clone(), "é".repeat(MAX_ECHOED_VERSION_BYTES / 2)),
    ] {
        let (route, _) = r.route(&request(
            "tools/list",
            with_meta(json!({META_PROTOCOL_VERSION: asked, META_CLIENT_CAPABILITIES: {}})),
        ));
        let Route::Answer(Err(e)) = route else {
            panic!("not refused")
        };
        assert_eq!(e.code, UNSUPPORTED_PROTOCOL_VERSION);
        assert_eq!(e.message, "Unsupported protocol version");
        let data: Value = serde_json::from_str(e.data.unwrap().get()).unwrap();
        assert_eq!(
            data,
            json!({"requested": echoed, "supported": SUPPORTED_PROTOCOL_VERSIONS})
        );
    }
    assert_eq!(r.metrics().unsupported_version_refused, 2);
    assert!(!r.began_modern());
}

#[test]
fn modern_requests_lose_ping_and_set_level_and_are_counted() {
    let mut b = one_tool();
    b.capabilities(&json!({"logging": {}})).unwrap();
    let mut r = BasicsRouter::new(b);
    assert_eq!(
        answer(&mut r, "ping", modern(json!({})))["error"],
        METHOD_NOT_FOUND
    );
    let set = modern(json!({"level": "info"}));
    assert_eq!(
        answer(&mut r, "logging/setLevel", set)["error"],
        METHOD_NOT_FOUND
    );
    assert_eq!(
        answer(&mut r, "tools/list", modern(json!({})))["tools"][0]["name"],
        "echo"
    );
    let m = r.metrics();
    assert_eq!(m.modern_requests, 3);
    assert_eq!(m.method_not_found, 2);
    assert_eq!(m.requests_before_initialize, 0);
    // A legacy client in another session keeps both.
    let mut b = one_tool();
    b.capabilities(&json!({"logging": {}})).unwrap();
    let mut r = BasicsRouter::new(b);
    assert_eq!(answer(&mut r, "ping", None), json!({}));
    assert_eq!(answer(&mut r, "logging/setLevel", None), json!("handler"));
}

#[test]
fn the_context_of_a_modern_request_is_kept_bounded_for_its_handler() {
    let mut r = BasicsRouter::new(one_tool());
    let (_, rev) = r.route(&request("tools/call", modern(json!({"name": "echo"}))));
    let hello = rev.client.expect("the request's context");
    assert_eq!(hello.protocol_version, "2026-07-28");
    assert_eq!(
        hello.client_info,
        Some(Implementation::new("modern-client", "9"))
    );
    assert_eq!(
        hello.capabilities.as_ref().unwrap().get(),
        r#"{"elicitation":{}}"#
    );
    assert_eq!(
        r.last_modern_client().unwrap().client_info,
        Some(Implementation::new("modern-client", "9"))
    );
    // Oversized or malformed parts are dropped, the request still served.
    let big = with_meta(json!({
        META_PROTOCOL_VERSION: "2026-07-28",
        META_CLIENT_CAPABILITIES: {"x": "y".repeat(MAX_CAPABILITIES_BYTES)},
        META_CLIENT_INFO: {"name": "n".repeat(MAX_SERVER_INFO_BYTES), "version": "1"},
    }))
    .map(|mut p| {
        p["name"] = json!("echo");
        p
    });
    let (route, rev) = r.route(&request("tools/call", big));
    assert!(matches!(route, Route::Handler));
    let hello = rev.client.unwrap();
    assert!(hello.client_info.is_none() && hello.capabilities.is_none());
}

#[test]
fn modern_results_get_result_type_and_cacheable_ones_ttl_and_scope() {
    let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
    let shaped = modern_result(&raw(r#"{"content":[]}"#), false).unwrap();
    assert_eq!(shaped.get(), r#"{"resultType":"complete","content":[]}"#);
    let shaped = modern_result(&raw(r#"{"tools":[]}"#), true).unwrap();
    assert_eq!(
        shaped.get(),
        r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":[]}"#
    );
    // What the handler set stays; a complete result is kept as it is.
    let shaped = modern_result(&raw(r#"{"ttlMs":5000,"tools":[]}"#), true).unwrap();
    let v: Value = serde_json::from_str(shaped.get()).unwrap();
    assert_eq!(v["ttlMs"], 5000);
    assert!(modern_result(&raw(r#"{"resultType":"task","task":{}}"#), false).is_none());
    assert!(modern_result(&raw("[1]"), false).is_none());
}

#[test]
fn the_way_out_still_tells_the_handler_the_named_revision() {
    let mut r = BasicsRouter::new(ServerBasics::passthrough());
    for (method, params, want) in [
        ("server/discover", modern(json!({})), "handler@2026-07-28"),
        ("ping", modern(json!({})), "handler@2026-07-28"),
        (
            "tools/list",
            with_meta(json!({META_PROTOCOL_VERSION: "2099-01-01"})),
            "handler@none",
        ),
        ("tools/list", None, "handler@none"),
    ] {
        assert_eq!(outcome(&mut r, method, params), want, "{method}");
    }
    assert_eq!(r.metrics(), &BasicsMetrics::default());
}
