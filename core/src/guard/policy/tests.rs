//! The policies, input by input. With real servers and clients: the
//! guard's tests in `cli/`.

use std::time::{Duration, Instant};

use super::*;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn f4_patterns_match_with_stars_and_question_marks_in_linear_time() {
    let p = |t: &str| ToolPattern::new(t).expect("a pattern");
    assert!(p("echo").matches("echo"));
    assert!(!p("echo").matches("echo2"));
    assert!(p("get-*").matches("get-sum"));
    assert!(p("get-*").matches("get-"));
    assert!(!p("get-*").matches("set-sum"));
    assert!(p("*sum").matches("get-sum"));
    assert!(p("g?t-*m").matches("get-sum"));
    assert!(p("*").matches(""));
    assert!(p("a*b*c").matches("axxbyyc"));
    assert!(!p("a*b*c").matches("axxbyy"));
    // A pattern that backtracks exponentially in a naive matcher.
    let long = "a".repeat(200);
    assert!(!p("a*a*a*a*a*a*a*a*b").matches(&long));
    assert_eq!(ToolPattern::new(""), Err(PolicyError::EmptyPattern));
    assert!(ToolPattern::new(&"x".repeat(MAX_PATTERN_BYTES + 1)).is_err());
}

#[test]
fn f4_the_filter_allows_only_the_list_and_never_the_denied() {
    let f =
        ToolFilter::new(Some(&names(&["echo", "get-*"])), &names(&["get-env"])).expect("a filter");
    assert_eq!(f.check("echo"), Ok(()));
    assert_eq!(f.check("get-sum"), Ok(()));
    assert_eq!(
        f.check("get-env"),
        Err(ToolRefusal::Denied("get-env".to_owned()))
    );
    assert_eq!(f.check("shell"), Err(ToolRefusal::NotAllowed));
    assert!(ToolRefusal::NotAllowed
        .describe("shell")
        .contains("--tools"));
    assert!(ToolRefusal::Denied("get-*".into())
        .describe("get-env")
        .contains("--deny-tool get-*"));
    let deny_only = ToolFilter::new(None, &names(&["rm*"])).expect("a filter");
    assert_eq!(deny_only.check("anything"), Ok(()));
    assert!(deny_only.check("rmdir").is_err());
    assert!(ToolFilter::default().is_open());
    let many = vec!["x".to_owned(); MAX_TOOL_PATTERNS + 1];
    assert_eq!(
        ToolFilter::new(Some(&many), &[]),
        Err(PolicyError::TooManyPatterns)
    );
}

#[test]
fn f4_a_tools_list_loses_the_tools_outside_the_policy_and_keeps_the_rest() {
    let f = ToolFilter::new(
        Some(&names(&["echo", "get-*", "missing"])),
        &names(&["get-env"]),
    )
    .expect("a filter");
    let list = r#"{"tools":[{"name":"echo","inputSchema":{}},{"name":"get-env"},{"name":"get-sum","title":"Sum"},{"name":"shell"}],"nextCursor":"c2"}"#;
    let (out, removed) = f.filter_list(list).expect("filtered");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let kept: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(kept, ["echo", "get-sum"]);
    assert_eq!(v["nextCursor"], "c2", "pagination kept");
    assert_eq!(v["tools"][1]["title"], "Sum");
    assert_eq!(removed, ["get-env", "shell"]);
    // Nothing to take out, or not a list: untouched.
    assert!(f.filter_list(r#"{"tools":[{"name":"echo"}]}"#).is_none());
    assert!(f.filter_list(r#"{"content":[]}"#).is_none());
    assert!(f.filter_list("not json").is_none());
    // `--tools` names no tool has: said once, patterns never.
    let have = names(&["echo", "get-sum"]);
    let unmatched: Vec<&str> = f.unmatched(&have).collect();
    assert_eq!(unmatched, ["missing"]);
}

#[test]
fn f4_rate_limits_parse_in_their_forms_and_refuse_others() {
    let r = RateRule::parse("5/1s").expect("5/1s");
    assert_eq!(
        (r.tool, r.calls, r.period),
        (None, 5, Duration::from_secs(1))
    );
    let r = RateRule::parse("search=10/1m").expect("per tool");
    assert_eq!(r.tool.as_deref(), Some("search"));
    assert_eq!(r.period, Duration::from_secs(60));
    assert_eq!(
        RateRule::parse("3/s").expect("unit alone").period,
        Duration::from_secs(1)
    );
    assert_eq!(
        RateRule::parse("2/500ms").expect("ms").period,
        Duration::from_millis(500)
    );
    for bad in [
        "", "5", "0/1s", "5/0s", "x/1s", "5/1d", "=5/1s", "5/-1s", "5/1.5s",
    ] {
        let e = RateRule::parse(bad).expect_err(bad);
        assert!(e.to_string().contains("N/PERIOD"), "{bad}: {e}");
    }
}

#[test]
fn f4_a_burst_of_twenty_under_five_a_second_gets_fifteen_refusals_with_when_to_retry() {
    let mut l = RateLimiter::new(vec![RateRule::parse("5/1s").expect("rule")]).expect("limiter");
    let t0 = Instant::now();
    let mut refused = Vec::new();
    for k in 0..20 {
        if let Err(wait) = l.take("echo", t0 + Duration::from_micros(k)) {
            refused.push(wait);
        }
    }
    assert_eq!(refused.len(), 15);
    assert!(refused
        .iter()
        .all(|w| *w > Duration::ZERO && *w <= Duration::from_millis(200)));
    // A token comes back every 200 ms.
    assert!(l.take("echo", t0 + Duration::from_millis(150)).is_err());
    assert!(l.take("echo", t0 + Duration::from_millis(201)).is_ok());
    assert!(l.take("echo", t0 + Duration::from_millis(202)).is_err());
}

#[test]
fn f4_a_rule_for_one_tool_leaves_the_others_alone_and_every_rule_must_pass() {
    let mut l = RateLimiter::new(vec![
        RateRule::parse("search=1/1m").expect("rule"),
        RateRule::parse("3/1m").expect("rule"),
    ])
    .expect("limiter");
    let t = Instant::now();
    assert!(l.take("search", t).is_ok());
    assert!(l.take("search", t).is_err(), "its own rule");
    assert!(l.take("echo", t).is_ok());
    assert!(l.take("echo", t).is_ok());
    assert!(l.take("echo", t).is_err(), "the rule for all: 3 taken");
    let too_many = vec![RateRule::parse("1/1s").expect("rule"); MAX_RATE_LIMITS + 1];
    assert!(RateLimiter::new(too_many).is_err());
}

#[test]
fn f4_the_loop_brake_fires_on_the_fourth_identical_call_under_three() {
    let mut b = RepeatBrake::new(3).expect("a brake");
    let args = r#"{"q":"rust","page":1}"#;
    for _ in 0..3 {
        assert_eq!(b.check("search", Some(args)), Ok(()));
    }
    // The same call in another encoding is the same call.
    assert_eq!(
        b.check("search", Some(r#"{ "page": 1, "q": "rust" }"#)),
        Err(4)
    );
    assert_eq!(
        b.check("search", Some(args)),
        Err(5),
        "until a different call"
    );
    assert_eq!(b.check("search", Some(r#"{"q":"rust","page":2}"#)), Ok(()));
    assert_eq!(b.check("search", Some(args)), Ok(()));
    assert_eq!(b.check("fetch", Some(args)), Ok(()), "another tool");
    assert_eq!(RepeatBrake::new(0).err(), Some(PolicyError::ZeroRepeat));
}

#[test]
fn f4_prompts_and_resources_are_filtered_by_name_and_uri_like_tools() {
    let mut policy = ToolPolicy::new(ToolFilter::default(), RateLimiter::default(), None)
        .listed_filters(
            ToolFilter::new(Some(&names(&["simple-*"])), &[]).expect("prompts"),
            ToolFilter::new(None, &names(&["file:///etc/*"])).expect("resources"),
        );
    assert!(!policy.is_empty());
    assert_eq!(policy.filters_list("tools/list"), None, "tools are open");
    assert_eq!(policy.filters_list("prompts/list"), Some(Listed::Prompts));
    assert_eq!(
        policy.filters_list("resources/list"),
        Some(Listed::Resources)
    );
    let (out, _) = policy.filter_list(
        Listed::Prompts,
        r#"{"prompts":[{"name":"simple-prompt"},{"name":"complex"}],"nextCursor":"2"}"#,
    );
    let out: serde_json::Value = serde_json::from_str(&out.expect("filtered")).expect("JSON");
    assert_eq!(
        out["prompts"],
        serde_json::json!([{"name": "simple-prompt"}])
    );
    assert_eq!(out["nextCursor"], "2");
    let (out, _) = policy.filter_list(
        Listed::Resources,
        r#"{"resources":[{"uri":"file:///etc/passwd"},{"uri":"file:///home/a"}]}"#,
    );
    assert!(!out.expect("filtered").contains("passwd"));
    let err = policy
        .check_request("prompts/get", Some(r#"{"name":"complex"}"#))
        .expect_err("not in --prompts");
    assert_eq!(err.code, POLICY_REFUSED);
    assert!(err
        .message
        .contains("the prompt `complex` is not in the guard's --prompts list"));
    let err = policy
        .check_request("resources/read", Some(r#"{"uri":"file:///etc/shadow"}"#))
        .expect_err("denied");
    assert!(
        err.message.contains("--deny-resource file:///etc/*"),
        "{}",
        err.message
    );
    for (method, params) in [
        ("prompts/get", r#"{"name":"simple-prompt"}"#),
        ("resources/read", r#"{"uri":"file:///home/a"}"#),
        ("resources/subscribe", r#"{"uri":"file:///home/a"}"#),
        ("ping", "{}"),
    ] {
        assert!(
            policy.check_request(method, Some(params)).is_ok(),
            "{method}"
        );
    }
    assert!(policy
        .check_request("resources/subscribe", Some(r#"{"uri":"file:///etc/x"}"#))
        .is_err());
    let m = policy.metrics();
    assert_eq!(m.refused_by.get("prompts"), Some(&1));
    assert_eq!(m.refused_by.get("resources"), Some(&2));
    assert_eq!((m.prompts_hidden, m.resources_hidden), (1, 1));
}
