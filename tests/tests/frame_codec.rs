//! The core's framer as tokio-util's `Decoder` over a real server's stdout:
//! an oversized response is an item naming its id, found wherever the id sits
//! (G3), and the stream goes on to the next frame (G2) — where `LinesCodec`
//! under `FramedRead` would end the stream at its first error.

use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use mcp_stdio_core::codec::{FrameCodec, FrameItem};
use mcp_stdio_core::Id;
use mcp_stdio_core::IdRecovery;
use mcp_stdio_core::{FrameError, FramerConfig};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::FramedRead;

const LIMIT: usize = 64 * 1024;

async fn send(stdin: &mut tokio::process::ChildStdin, line: String) {
    stdin.write_all(line.as_bytes()).await.expect("write");
    stdin.flush().await.expect("flush");
}

#[tokio::test]
async fn g3_framed_read_reports_an_id_last_oversized_response_and_goes_on() {
    let mut child = tokio::process::Command::new(mcp_stdio_tests::fixture_server_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fixture-server");
    let mut stdin = child.stdin.take().expect("stdin");
    let call = |id: u32, name: &str, arguments: serde_json::Value| {
        let mut line = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}
        })
        .to_string();
        line.push('\n');
        line
    };
    let mut config = FramerConfig::default();
    config.max_frame(LIMIT);
    let mut frames = FramedRead::new(
        child.stdout.take().expect("stdout"),
        FrameCodec::new(config),
    );
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(20), frames.next())
            .await
            .expect("an item within 20 s")
            .expect("the stream goes on")
            .expect("no I/O error")
    };

    let start = Instant::now();
    send(
        &mut stdin,
        call(7, "big_id_last", serde_json::json!({"bytes": 1 << 20})),
    )
    .await;
    let first = next().await;
    let second = next().await;
    eprintln!("oversized response reported in {:?}", start.elapsed());
    assert!(
        matches!(
            &first,
            FrameItem::Error(FrameError::Oversized {
                limit: LIMIT,
                id_hint: None
            })
        ),
        "{first:?}"
    );
    match &second {
        FrameItem::Error(FrameError::OversizedEnded {
            recovered, hinted, ..
        }) => {
            assert_eq!(*recovered, IdRecovery::Found(Id::Number(7)));
            assert!(!hinted);
        }
        other => panic!("expected OversizedEnded, got {other:?}"),
    }

    send(
        &mut stdin,
        call(8, "echo", serde_json::json!({"text": "after"})),
    )
    .await;
    match next().await {
        FrameItem::Frame(f) => assert!(f.contains("\"id\":8") && f.contains("after"), "{f}"),
        other => panic!("expected the echo's frame, got {other:?}"),
    }
    eprintln!("the next frame read in {:?}", start.elapsed());
    assert!(
        frames.decoder().framer().buffer_capacity() <= LIMIT + 1 + 64 * 1024,
        "the framer held more than its bound"
    );
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
}
