//! The options style of the crate docs' "Configuration" section: an options
//! type holds knobs and sub-configs, a sub-config holds knobs only (two
//! levels at most), each knob has one setter, a sub-config is edited in place
//! and read back through its getter, and the defaults are the documented
//! ones.

use std::time::{Duration, Instant};

use mcp_stdio_core::to_raw;
use mcp_stdio_core::ClientOptions;
use mcp_stdio_core::GuardConfig;
use mcp_stdio_core::Implementation;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::SupervisorConfig;
use mcp_stdio_core::DEFAULT_TAIL;
use mcp_stdio_core::{FramerConfig, InvalidUtf8Policy, OversizedPolicy};
use mcp_stdio_core::{HelperOptions, DEFAULT_STDOUT_TAIL, DISCOVERY_STDOUT_TAIL};
use mcp_stdio_core::{ServeOptions, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HELPER_GRACE};
use mcp_stdio_core::{DEFAULT_ID_SCAN_LIMIT, DEFAULT_MAX_FRAME};

fn default_framer(f: &FramerConfig) {
    assert_eq!(f.get_max_frame(), DEFAULT_MAX_FRAME);
    assert_eq!(f.get_id_scan_limit(), DEFAULT_ID_SCAN_LIMIT);
    assert_eq!(f.get_oversized_policy(), OversizedPolicy::Discard);
    assert_eq!(f.get_invalid_utf8(), InvalidUtf8Policy::Repair);
}

#[test]
fn client_options_defaults_are_the_documented_ones() {
    let o = ClientOptions::default();
    default_framer(o.get_framer());
    assert_eq!(
        o.get_session().get_default_timeout(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(o.get_stderr().get_tail(), DEFAULT_TAIL);
    assert!(o.get_stderr_pool().is_some(), "the process pool by default");
    assert_eq!(o.get_client_info(), &Implementation::default());
    assert!(o.get_client_capabilities().is_none());
    assert_eq!(o.get_stderr_excerpt_bytes(), 4096);
    assert_eq!(o.get_supervisor(), &SupervisorConfig::default());
}

#[test]
fn client_options_sub_configs_are_edited_in_place_one_level_down() {
    let mut o = ClientOptions::default();
    o.stderr_pool(None)
        .stderr_excerpt_bytes(1024)
        .client_info(Implementation::new("my-host", "1.2.0"))
        .client_capabilities(Some(
            to_raw(&serde_json::json!({"roots": {}})).expect("JSON"),
        ));
    o.framer_mut()
        .max_frame(1 << 20)
        .id_scan_limit(64)
        .oversized_policy(OversizedPolicy::Close)
        .invalid_utf8(InvalidUtf8Policy::Refuse);
    o.session_mut().default_timeout(None).max_in_flight(8);
    o.stderr_mut().tail(4096);
    o.stderr_forward_mut().max_total_bytes(0);
    let f = o.get_framer();
    assert_eq!(f.get_max_frame(), 1 << 20);
    assert_eq!(f.get_id_scan_limit(), 64);
    assert_eq!(f.get_oversized_policy(), OversizedPolicy::Close);
    assert_eq!(f.get_invalid_utf8(), InvalidUtf8Policy::Refuse);
    assert_eq!(o.get_session().get_default_timeout(), None);
    assert_eq!(o.get_stderr().get_tail(), 4096);
    assert_eq!(o.get_stderr_excerpt_bytes(), 1024);
    assert!(o.get_stderr_pool().is_none());
    assert_eq!(o.get_client_info().name, "my-host");
    assert_eq!(o.get_client_info().version, "1.2.0");
    assert_eq!(
        o.get_client_capabilities().map(|c| c.get()),
        Some(r#"{"roots":{}}"#)
    );
}

#[test]
fn a_sub_config_is_replaced_through_its_accessor() {
    let mut graces = SupervisorConfig::default();
    graces
        .stdin_close_grace(Duration::from_millis(100))
        .term_grace(Duration::from_millis(200))
        .reader_drain_deadline(Duration::from_millis(300));
    let mut o = ClientOptions::default();
    *o.supervisor_mut() = graces;
    assert_eq!(o.get_supervisor(), &graces);
    // The other knobs are untouched.
    default_framer(o.get_framer());
    let mut framer = FramerConfig::default();
    framer.max_frame(4096);
    *o.framer_mut() = framer;
    assert_eq!(o.get_framer().get_max_frame(), 4096);
}

#[test]
fn serve_options_defaults_and_sub_configs() {
    let mut o = ServeOptions::default();
    default_framer(o.get_framer());
    assert_eq!(o.get_session().get_max_concurrent(), 64);
    assert_eq!(o.get_drain_timeout(), DEFAULT_DRAIN_TIMEOUT);
    assert_eq!(o.get_helper_grace(), DEFAULT_HELPER_GRACE);
    o.drain_timeout(Duration::from_millis(250))
        .helper_grace(Duration::from_secs(1));
    o.framer_mut().max_frame(8192);
    o.session_mut().max_concurrent(3);
    assert_eq!(o.get_framer().get_max_frame(), 8192);
    assert_eq!(o.get_session().get_max_concurrent(), 3);
    assert_eq!(o.get_drain_timeout(), Duration::from_millis(250));
    assert_eq!(o.get_helper_grace(), Duration::from_secs(1));
}

#[test]
fn guard_config_defaults_and_sub_configs() {
    let mut c = GuardConfig::default();
    default_framer(c.get_framer());
    assert_eq!(
        c.get_proxy().get_max_buffered(),
        mcp_stdio_core::DEFAULT_MAX_BUFFERED
    );
    c.framer_mut()
        .max_frame(4096)
        .oversized_policy(OversizedPolicy::Close);
    c.proxy_mut().max_buffered(1000);
    c.call_mut().max_text_bytes(64);
    assert_eq!(c.get_framer().get_max_frame(), 4096);
    assert_eq!(
        c.get_framer().get_oversized_policy(),
        OversizedPolicy::Close
    );
    assert_eq!(c.get_proxy().get_max_buffered(), 1000);
    assert_eq!(c.get_call().get_max_text_bytes(), 64);
}

#[test]
fn helper_options_identity_and_limits_reach_the_run() {
    let mut o = HelperOptions::default();
    assert!(o.get_pool().is_some(), "the process pool by default");
    assert_eq!(o.get_stdout().get_tail(), DEFAULT_STDOUT_TAIL);
    o.call_id("c_1")
        .session_id("s_1")
        .operation("git.log")
        .target("/srv/repo")
        .pool(None)
        .max_duration(Duration::from_secs(30));
    o.stdout_mut().tail(1024);
    o.call_mut().max_text_bytes(64);
    assert_eq!(o.get_call_id(), "c_1");
    assert_eq!(o.get_session_id(), "s_1");
    assert_eq!(o.get_operation(), "git.log");
    assert_eq!(o.get_target(), "/srv/repo");
    assert!(o.get_records().is_none());
    let run = o.start(Stamp::new(Instant::now(), 1_700_000_000_000));
    let record = run.record();
    assert_eq!(record.call_id(), "c_1");
    assert_eq!(record.session_id(), "s_1");
    assert_eq!(record.operation(), "git.log");
    assert_eq!(record.target(), "/srv/repo");
    assert_eq!(run.options().get_stdout().get_tail(), 1024);
    assert_eq!(run.options().get_call().get_max_text_bytes(), 64);
    assert_eq!(run.options().get_max_duration(), Duration::from_secs(30));
}

#[test]
fn discovery_options_are_a_preset_every_setter_still_changes() {
    let mut d = HelperOptions::discovery();
    assert_eq!(d.get_stdout().get_tail(), DISCOVERY_STDOUT_TAIL);
    assert_eq!(d.get_approval(), None);
    d.approval(Some(Duration::from_secs(5)))
        .operation("resolve-host");
    assert_eq!(d.get_approval(), None, "a discovery run has no approval");
    d.stdout_mut().tail(1024);
    assert_eq!(d.get_stdout().get_tail(), 1024);
    assert_eq!(d.get_operation(), "resolve-host");
}

/// One minimum wire limit, applied in one place: the framer config raises a
/// smaller value to `MIN_MAX_FRAME`, and every options type and session
/// takes its limit from a framer config, so none runs below it.
#[test]
fn the_minimum_wire_limit_is_the_framer_configs_for_every_machine() {
    use mcp_stdio_core::MIN_MAX_FRAME;
    use mcp_stdio_core::{ClientConfig, ClientSession, ServerConfig, ServerEvent, ServerSession};

    let mut framer = FramerConfig::default();
    assert_eq!(framer.max_frame(1).get_max_frame(), MIN_MAX_FRAME);
    assert_eq!(framer.max_frame(0).get_max_frame(), MIN_MAX_FRAME);
    assert_eq!(
        framer.max_frame(MIN_MAX_FRAME + 1).get_max_frame(),
        MIN_MAX_FRAME + 1
    );

    let mut client = ClientOptions::default();
    client.framer_mut().max_frame(10);
    assert_eq!(client.get_framer().get_max_frame(), MIN_MAX_FRAME);
    let mut serve = ServeOptions::default();
    serve.framer_mut().max_frame(10);
    assert_eq!(serve.get_framer().get_max_frame(), MIN_MAX_FRAME);
    let mut guard = GuardConfig::default();
    guard.framer_mut().max_frame(10);
    assert_eq!(guard.get_framer().get_max_frame(), MIN_MAX_FRAME);

    let mut tiny = FramerConfig::default();
    tiny.max_frame(10);
    let c = ClientSession::new(ClientConfig::default(), tiny.clone());
    assert_eq!(c.framer_config().get_max_frame(), MIN_MAX_FRAME);
    // A server session asked for 10 bytes takes a 60-byte request.
    let mut s = ServerSession::new(ServerConfig::default(), tiny);
    let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    assert!(request.len() > 10 && request.len() <= MIN_MAX_FRAME);
    s.handle_stdin(Instant::now(), request);
    s.handle_stdin(Instant::now(), b"\n");
    assert!(matches!(s.poll_event(), Some(ServerEvent::Request(_))));
}
