//! Exec against a real berthd and a real container, through the real
//! streaming server: a non-zero exit code, stdin end of file, a client
//! that goes away mid-stream (its process must not outlive it), and the
//! real crictl (client-go's executors) getting the exit code.
//!
//! The harness is the shared pod harness (tests/support/pods.rs): its own
//! berthd, registry, CNI bridge and cgroup parents, removed by a guard.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use berth_stream::spdy::{Headers, Role, Session, SessionConfig, Stream};
use berth_tests::host::log_tail;
use berth_tests::pods::{container_config, Harness, SETTLE};
use cri_api::v1::{ContainerState, ExecRequest, ExecSyncRequest, NamespaceMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------
// A remotecommand client (v4 over SPDY), from berth-stream's own session
// ---------------------------------------------------------------------------

/// Opens the URL an Exec call returned: the HTTP upgrade, then SPDY.
async fn connect_exec(url: &str) -> Session {
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (host, path) = rest.split_once('/').expect("URL path");
    let mut tcp = TcpStream::connect(host).await.expect("streaming server");
    let request = format!(
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
         X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        assert_eq!(
            tcp.read(&mut byte).await.unwrap(),
            1,
            "response head cut short"
        );
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    Session::start(tcp, Role::Client, SessionConfig::default()).0
}

fn open(session: &Session, stream_type: &str) -> Stream {
    session
        .open_stream(Headers::new().with("streamType", stream_type))
        .unwrap()
}

async fn read_all(stream: &mut Stream) -> String {
    let mut out = Vec::new();
    stream.reader.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

/// A running busybox container in a fresh pod.
async fn running_container(harness: &Harness, name: &str) -> (String, String) {
    let (pod, pod_config) = harness.run_pod(name, NamespaceMode::Pod).await;
    let config = container_config("main", &harness.image, &["sleep", "3600"]);
    let id = harness.run_container(&pod, &pod_config, config).await;
    (pod, id)
}

async fn exec_url(harness: &Harness, id: &str, cmd: &[&str], stdin: bool) -> String {
    harness
        .client()
        .await
        .exec(ExecRequest {
            container_id: id.to_string(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            tty: false,
            stdin,
            stdout: true,
            stderr: true,
        })
        .await
        .unwrap_or_else(|status| panic!("Exec {cmd:?}: {status:?}"))
        .into_inner()
        .url
}

async fn ps(harness: &Harness, id: &str) -> String {
    let out = harness
        .client()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.to_string(),
            cmd: vec!["ps".into()],
            timeout: 10,
        })
        .await
        .unwrap_or_else(|status| panic!("ExecSync ps: {status:?}"))
        .into_inner();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `crictl exec` against the harness's berthd over `transport`.
async fn crictl_exec(harness: &Harness, transport: &str, id: &str, cmd: &[&str]) -> Output {
    let endpoint = format!("unix://{}", harness.berthd.sandbox.socket().display());
    let mut command = Command::new("crictl");
    command
        .env("CRI_CONFIG_FILE", "/dev/null")
        .args([
            "-r",
            &endpoint,
            "-i",
            &endpoint,
            "exec",
            "--transport",
            transport,
            id,
        ])
        .args(cmd);
    tokio::task::spawn_blocking(move || command.output().expect("crictl (scripts/install-deps.sh)"))
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn exec_reports_exit_codes_and_sees_stdin_end() {
    let h = Harness::start().await;
    let (pod, id) = running_container(&h, "exec-codes").await;

    // A non-zero exit code comes back in the v4 status.
    let session = connect_exec(
        &exec_url(
            &h,
            &id,
            &["sh", "-c", "echo out; echo err >&2; exit 3"],
            false,
        )
        .await,
    )
    .await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    let mut stderr = open(&session, "stderr");
    let (out, err) = (read_all(&mut stdout).await, read_all(&mut stderr).await);
    let status = read_all(&mut error).await;
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("out\n", "err\n"),
        "status: {status}"
    );
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");

    // cat only exits once its stdin reaches end of file.
    let session = connect_exec(&exec_url(&h, &id, &["cat"], true).await).await;
    let mut error = open(&session, "error");
    let mut stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let _stderr = open(&session, "stderr");
    stdin
        .writer
        .write_all(b"through the container\n")
        .await
        .unwrap();
    stdin.writer.shutdown().await.unwrap();
    assert_eq!(read_all(&mut stdout).await, "through the container\n");
    assert_eq!(
        read_all(&mut error).await,
        r#"{"metadata":{},"status":"Success"}"#
    );

    h.remove_pod(&pod).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_leaves_no_process_behind() {
    let h = Harness::start().await;
    let (pod, id) = running_container(&h, "exec-gone").await;

    let url = exec_url(
        &h,
        &id,
        &["sh", "-c", "echo started; exec sleep 4242"],
        true,
    )
    .await;
    let session = connect_exec(&url).await;
    let _error = open(&session, "error");
    let _stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let _stderr = open(&session, "stderr");
    let mut started = [0u8; 8];
    stdout.reader.read_exact(&mut started).await.unwrap();
    assert_eq!(&started, b"started\n");
    assert!(ps(&h, &id).await.contains("sleep 4242"));

    // The client vanishes mid-stream: its connection closes.
    session.shutdown(Duration::ZERO).await;
    drop(session);

    let deadline = Instant::now() + SETTLE;
    loop {
        let ps = ps(&h, &id).await;
        if !ps.contains("sleep 4242") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the exec'd process outlived its client:\n{ps}\nberthd log:\n{}",
            log_tail(&h.berthd)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The container itself keeps running.
    assert_eq!(
        h.status(&id).await.state,
        ContainerState::ContainerRunning as i32
    );
    h.remove_pod(&pod).await;
}

/// client-go's spdystream stops reading at GOAWAY: a status queued behind
/// it was lost and crictl exited 0. Several runs, as the loss was a race.
#[tokio::test(flavor = "multi_thread")]
async fn crictl_exec_reports_the_exit_code_over_spdy_and_websocket() {
    let h = Harness::start().await;
    let (pod, id) = running_container(&h, "exec-crictl").await;

    for transport in [
        "spdy",
        "spdy",
        "spdy",
        "spdy",
        "spdy",
        "websocket",
        "websocket",
    ] {
        let out = crictl_exec(&h, transport, &id, &["sh", "-c", "echo hi; exit 5"]).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            (out.status.code(), stdout.as_ref()),
            (Some(1), "hi\n"),
            "crictl exec over {transport}; stderr: {stderr}\nberthd log:\n{}",
            log_tail(&h.berthd)
        );
        assert!(
            stderr.contains("command terminated with exit code 5"),
            "crictl exec over {transport}; stderr: {stderr}"
        );
    }

    h.remove_pod(&pod).await;
}
