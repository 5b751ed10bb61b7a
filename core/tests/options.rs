//! The options style of the crate docs' "Configuration" section: a shortcut
//! on an options type is the nested knob of the same name (one knob, one
//! name), a nested config is edited in place, and the defaults are the
//! documented ones.

use std::time::{Duration, Instant};

use mcp_stdio_core::to_raw;
use mcp_stdio_core::ClientOptions;
use mcp_stdio_core::Implementation;
use mcp_stdio_core::Stamp;
use mcp_stdio_core::SupervisorConfig;
use mcp_stdio_core::DEFAULT_MAX_FRAME;
use mcp_stdio_core::DEFAULT_TAIL;
use mcp_stdio_core::{HelperConfig, HelperOptions, DEFAULT_STDOUT_TAIL};
use mcp_stdio_core::{ServeOptions, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HELPER_GRACE};

#[test]
fn client_options_defaults_are_the_documented_ones() {
    let o = ClientOptions::default();
    assert_eq!(o.get_max_frame(), DEFAULT_MAX_FRAME);
    assert_eq!(o.get_default_timeout(), Some(Duration::from_secs(60)));
    assert_eq!(o.get_stderr_tail(), DEFAULT_TAIL);
    assert!(o.get_stderr_pool().is_some(), "the process pool by default");
    assert_eq!(o.get_client_info(), &Implementation::default());
    assert!(o.get_client_capabilities().is_none());
    let host = o.get_config();
    assert_eq!(host.get_stderr_excerpt_bytes(), 4096);
    assert_eq!(host.get_supervisor(), &SupervisorConfig::default());
}

#[test]
fn client_options_shortcuts_are_the_nested_knobs() {
    let mut o = ClientOptions::default();
    o.max_frame(1 << 20)
        .default_timeout(None)
        .stderr_tail(4096)
        .stderr_pool(None)
        .client_info(Implementation::new("my-host", "1.2.0"))
        .client_capabilities(Some(
            to_raw(&serde_json::json!({"roots": {}})).expect("JSON"),
        ));
    // Written through the shortcut, read one level down.
    let session = o.get_config().get_session();
    assert_eq!(session.get_max_frame(), 1 << 20);
    assert_eq!(session.get_framer().get_max_frame(), 1 << 20);
    assert_eq!(session.get_default_timeout(), None);
    assert_eq!(o.get_config().get_stderr().get_tail(), 4096);
    assert!(o.get_stderr_pool().is_none());
    assert_eq!(o.get_client_info().name, "my-host");
    assert_eq!(o.get_client_info().version, "1.2.0");
    assert_eq!(
        o.get_client_capabilities().map(|c| c.get()),
        Some(r#"{"roots":{}}"#)
    );
    // Written one level down, read through the shortcut.
    o.config_mut().session_mut().framer_mut().max_frame(4096);
    o.config_mut()
        .session_mut()
        .default_timeout(Some(Duration::from_secs(3)));
    o.config_mut().stderr_mut().tail(512);
    assert_eq!(o.get_max_frame(), 4096);
    assert_eq!(o.get_default_timeout(), Some(Duration::from_secs(3)));
    assert_eq!(o.get_stderr_tail(), 512);
}

#[test]
fn a_nested_config_is_replaced_through_its_accessor() {
    let mut graces = SupervisorConfig::default();
    graces
        .stdin_close_grace(Duration::from_millis(100))
        .term_grace(Duration::from_millis(200))
        .reader_drain_deadline(Duration::from_millis(300));
    let mut o = ClientOptions::default();
    *o.config_mut().supervisor_mut() = graces;
    assert_eq!(o.get_config().get_supervisor(), &graces);
    // The other knobs are untouched.
    assert_eq!(o.get_max_frame(), DEFAULT_MAX_FRAME);
}

#[test]
fn serve_options_defaults_and_shortcuts() {
    let mut o = ServeOptions::default();
    assert_eq!(o.get_max_frame(), DEFAULT_MAX_FRAME);
    assert_eq!(o.get_max_concurrent(), 64);
    assert_eq!(o.get_drain_timeout(), DEFAULT_DRAIN_TIMEOUT);
    assert_eq!(o.get_helper_grace(), DEFAULT_HELPER_GRACE);
    o.max_frame(8192)
        .max_concurrent(3)
        .drain_timeout(Duration::from_millis(250))
        .helper_grace(Duration::from_secs(1));
    assert_eq!(o.get_config().get_max_frame(), 8192);
    assert_eq!(o.get_config().get_framer().get_max_frame(), 8192);
    assert_eq!(o.get_config().get_max_concurrent(), 3);
    assert_eq!(o.get_drain_timeout(), Duration::from_millis(250));
    assert_eq!(o.get_helper_grace(), Duration::from_secs(1));
    o.config_mut().max_concurrent(7);
    assert_eq!(o.get_max_concurrent(), 7);
}

#[test]
fn helper_options_identity_and_config_reach_the_run() {
    let mut o = HelperOptions::default();
    assert!(o.get_pool().is_some(), "the process pool by default");
    assert_eq!(o.get_config().get_stdout().get_tail(), DEFAULT_STDOUT_TAIL);
    o.call_id("c_1")
        .session_id("s_1")
        .operation("git.log")
        .target("/srv/repo")
        .pool(None);
    o.config_mut().stdout_mut().tail(1024);
    o.config_mut().call_mut().max_text_bytes(64);
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
    assert_eq!(run.config().get_stdout().get_tail(), 1024);
    assert_eq!(run.config().get_call().get_max_text_bytes(), 64);
    // A discovery config is swapped in whole through the same accessor.
    *o.config_mut() = HelperConfig::discovery();
    assert_eq!(o.get_config().get_approval(), None);
    assert_eq!(o.get_call_id(), "c_1", "identity kept");
}
