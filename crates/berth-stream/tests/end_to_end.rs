//! Drives the real server over TCP with clients built from the crate's own
//! SPDY session and tokio-tungstenite, against a fake runtime (the
//! protocol logic is what is under test here).

use std::sync::Arc;
use std::time::Duration;

use berth_stream::spdy::{Headers, Role, Session, SessionConfig, Stream};
use berth_stream::ws_tunnel::WsTunnel;
use berth_stream::{
    AttachSpec, ExecSpec, SessionError, SessionStreams, StreamRuntime, StreamServer,
    StreamServerConfig,
};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Mutex};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// A runtime whose "commands" exercise one protocol feature each.
struct Fake {
    pod_port: u16,
    /// Receives a message when a "hang" exec's future is dropped.
    dropped: mpsc::UnboundedSender<()>,
}

struct DropSignal(mpsc::UnboundedSender<()>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

impl StreamRuntime for Fake {
    async fn exec(&self, spec: ExecSpec, mut s: SessionStreams) -> Result<i32, SessionError> {
        let arg = |i: usize| spec.cmd.get(i).cloned().unwrap_or_default();
        match arg(0).as_str() {
            "exit" => {
                if let Some(out) = s.stdout.as_mut() {
                    out.write_all(b"out").await.unwrap();
                }
                if let Some(err) = s.stderr.as_mut() {
                    err.write_all(b"err").await.unwrap();
                }
                Ok(arg(1).parse().unwrap())
            }
            "cat" => {
                let mut input = s.stdin.take().unwrap();
                let mut out = s.stdout.take().unwrap();
                tokio::io::copy(&mut input, &mut out).await.unwrap();
                Ok(0)
            }
            "big" => {
                let n: usize = arg(1).parse().unwrap();
                let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                s.stdout.as_mut().unwrap().write_all(&data).await.unwrap();
                Ok(0)
            }
            "resize" => {
                let size = s.resize.as_mut().unwrap().recv().await.unwrap();
                let text = format!("{}x{}", size.width, size.height);
                s.stdout
                    .as_mut()
                    .unwrap()
                    .write_all(text.as_bytes())
                    .await
                    .unwrap();
                Ok(0)
            }
            "hang" => {
                let _signal = DropSignal(self.dropped.clone());
                let out = s.stdout.as_mut().unwrap();
                out.write_all(b"started").await.unwrap();
                std::future::pending::<()>().await;
                Ok(0)
            }
            "missing" => Err(SessionError::ContainerNotFound(spec.container_id)),
            other => panic!("unknown fake command {other}"),
        }
    }

    async fn attach(&self, _spec: AttachSpec, mut s: SessionStreams) -> Result<(), SessionError> {
        s.stdout
            .as_mut()
            .unwrap()
            .write_all(b"attached")
            .await
            .unwrap();
        Ok(())
    }

    async fn port_forward(&self, pod: &str, _port: u16) -> Result<TcpStream, SessionError> {
        if pod != "pod1" {
            return Err(SessionError::SandboxNotFound(pod.into()));
        }
        TcpStream::connect(("127.0.0.1", self.pod_port))
            .await
            .map_err(|e| SessionError::Failed(e.to_string()))
    }
}

/// The "pod": answers each connection with its input in upper case.
async fn upper_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf[..n].make_ascii_uppercase();
                    if conn.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

struct Harness {
    server: StreamServer,
    dropped: Mutex<mpsc::UnboundedReceiver<()>>,
}

async fn harness() -> Harness {
    harness_with(StreamServerConfig::default()).await
}

async fn harness_with(config: StreamServerConfig) -> Harness {
    let (tx, rx) = mpsc::unbounded_channel();
    let runtime = Arc::new(Fake {
        pod_port: upper_server().await,
        dropped: tx,
    });
    let server = StreamServer::start(config, runtime).await.unwrap();
    Harness {
        server,
        dropped: Mutex::new(rx),
    }
}

fn exec(cmd: &[&str], stdin: bool, stdout: bool, stderr: bool, tty: bool) -> ExecSpec {
    ExecSpec {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty,
        stdin,
        stdout,
        stderr,
    }
}

fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    (host.to_string(), format!("/{path}"))
}

/// Sends the upgrade request and reads the response head.
async fn upgrade(url: &str, protocols: &[&str]) -> (TcpStream, u16, String) {
    let (host, path) = split_url(url);
    let mut tcp = TcpStream::connect(&host).await.unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
    );
    for p in protocols {
        req.push_str(&format!("X-Stream-Protocol-Version: {p}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    // Byte by byte, so nothing after the head is consumed.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8];
        if tcp.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    let status = head[9..12].parse().unwrap();
    (tcp, status, head)
}

async fn spdy_client(url: &str, protocol: &str) -> Session {
    let (tcp, status, head) = upgrade(url, &[protocol, "channel.k8s.io"]).await;
    assert_eq!(status, 101, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("x-stream-protocol-version: {protocol}")),
        "{head}"
    );
    let (session, _incoming) = Session::start(tcp, Role::Client, SessionConfig::default());
    // Announce our window, so the server enforces flow control.
    session.send_initial_window(64 * 1024);
    session
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

#[tokio::test]
async fn spdy_v4_exec_exit_zero_reports_success() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "0"], false, true, true, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    let mut stderr = open(&session, "stderr");
    assert_eq!(read_all(&mut stdout).await, "out");
    assert_eq!(read_all(&mut stderr).await, "err");
    assert_eq!(
        read_all(&mut error).await,
        r#"{"metadata":{},"status":"Success"}"#
    );
}

#[tokio::test]
async fn spdy_v4_exec_non_zero_exit_reports_the_code() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "7"], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    assert_eq!(read_all(&mut stdout).await, "out");
    let status: serde_json::Value = serde_json::from_str(&read_all(&mut error).await).unwrap();
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"][0]["reason"], "ExitCode");
    assert_eq!(status["details"]["causes"][0]["message"], "7");
}

#[tokio::test]
async fn spdy_v3_reports_failures_as_text() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "2"], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v3.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    assert_eq!(read_all(&mut stdout).await, "out");
    assert!(read_all(&mut error)
        .await
        .starts_with("command terminated with non-zero exit code"));
}

#[tokio::test]
async fn spdy_runtime_errors_reach_the_client() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["missing"], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let _stdout = open(&session, "stdout");
    let status: serde_json::Value = serde_json::from_str(&read_all(&mut error).await).unwrap();
    assert_eq!(status["reason"], "InternalError");
    assert!(status["message"].as_str().unwrap().contains("not found"));
}

#[tokio::test]
async fn spdy_stdin_eof_reaches_the_runtime() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["cat"], true, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    stdin.writer.write_all(b"hello ").await.unwrap();
    stdin.writer.write_all(b"world").await.unwrap();
    // FLAG_FIN on stdin: "cat" only finishes once it sees end of file.
    stdin.writer.shutdown().await.unwrap();
    assert_eq!(read_all(&mut stdout).await, "hello world");
    assert_eq!(
        read_all(&mut error).await,
        r#"{"metadata":{},"status":"Success"}"#
    );
}

#[tokio::test]
async fn spdy_output_beyond_the_window_flows_with_window_updates() {
    let h = harness().await;
    let n = 300 * 1024;
    let url = h
        .server
        .exec_url(exec(&["big", &n.to_string()], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    let mut out = Vec::new();
    stdout.reader.read_to_end(&mut out).await.unwrap();
    assert_eq!(out.len(), n);
    assert!(out.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    assert!(read_all(&mut error).await.contains("Success"));
}

#[tokio::test]
async fn spdy_resize_events_reach_the_runtime() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["resize"], true, true, false, true))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let _stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let mut resize = open(&session, "resize");
    resize
        .writer
        .write_all(br#"{"Width":100,"Height":40}"#)
        .await
        .unwrap();
    assert_eq!(read_all(&mut stdout).await, "100x40");
    assert!(read_all(&mut error).await.contains("Success"));
}

#[tokio::test]
async fn spdy_client_disconnect_drops_the_runtime_future() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["hang"], true, true, false, false))
        .unwrap();
    let (tcp, status, _) = upgrade(&url, &["v4.channel.k8s.io"]).await;
    assert_eq!(status, 101);
    let (session, _incoming) = Session::start(tcp, Role::Client, SessionConfig::default());
    let _error = open(&session, "error");
    let _stdin = open(&session, "stdin");
    let mut stdout = open(&session, "stdout");
    let mut started = [0u8; 7];
    stdout.reader.read_exact(&mut started).await.unwrap();
    assert_eq!(&started, b"started");
    // The client goes away mid-stream (its side of the connection closes).
    session.shutdown(Duration::ZERO).await;
    let dropped = h.dropped.lock().await.recv().await;
    assert_eq!(dropped, Some(()));
}

#[tokio::test]
async fn spdy_attach_runs_the_attach_call() {
    let h = harness().await;
    let url = h
        .server
        .attach_url(AttachSpec {
            container_id: "c1".into(),
            tty: false,
            stdin: false,
            stdout: true,
            stderr: false,
        })
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let mut error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    assert_eq!(read_all(&mut stdout).await, "attached");
    assert!(read_all(&mut error).await.contains("Success"));
}

#[tokio::test]
async fn tokens_work_once_and_only_on_their_path() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "0"], false, true, false, false))
        .unwrap();
    let (_tcp, status, _) = upgrade(&url, &["v4.channel.k8s.io"]).await;
    assert_eq!(status, 101);
    let (_tcp, status, _) = upgrade(&url, &["v4.channel.k8s.io"]).await;
    assert_eq!(status, 404, "a reused token");
    let (host, _) = split_url(&url);
    let (_tcp, status, _) = upgrade(&format!("http://{host}/exec/0123"), &[]).await;
    assert_eq!(status, 404, "an unknown token");
    let attach = h
        .server
        .exec_url(exec(&["exit", "0"], false, true, false, false))
        .unwrap()
        .replace("/exec/", "/attach/");
    let (_tcp, status, _) = upgrade(&attach, &["v4.channel.k8s.io"]).await;
    assert_eq!(status, 404, "an exec token on the attach path");
    assert!(url.starts_with(&format!("http://{}/exec/", h.server.local_addr())));
}

#[tokio::test]
async fn unsupported_protocols_are_refused() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "0"], false, true, false, false))
        .unwrap();
    let (_tcp, status, head) = upgrade(&url, &["v9.channel.k8s.io"]).await;
    assert_eq!(status, 403);
    assert!(head
        .to_ascii_lowercase()
        .contains("x-accepted-stream-protocol-versions: v4.channel.k8s.io"));
}

async fn forward_twice(session: &Session) {
    for request_id in ["0", "1"] {
        let headers = |t: &str| {
            Headers::new()
                .with("streamType", t)
                .with("port", "80")
                .with("requestID", request_id)
        };
        let mut error = session.open_stream(headers("error")).unwrap();
        error.writer.shutdown().await.unwrap();
        let mut data = session.open_stream(headers("data")).unwrap();
        data.writer.write_all(b"ping ").await.unwrap();
        data.writer.write_all(request_id.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 6];
        data.reader.read_exact(&mut buf).await.unwrap();
        assert_eq!(buf, format!("PING {request_id}").as_bytes());
        data.writer.shutdown().await.unwrap();
        let mut rest = Vec::new();
        data.reader.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert_eq!(read_all(&mut error).await, "");
    }
}

#[tokio::test]
async fn spdy_port_forward_copies_both_ways() {
    let h = harness().await;
    let url = h.server.port_forward_url("pod1").unwrap();
    let session = spdy_client(&url, "portforward.k8s.io").await;
    forward_twice(&session).await;
}

#[tokio::test]
async fn port_forward_errors_go_to_the_error_stream() {
    let h = harness().await;
    let url = h.server.port_forward_url("nopod").unwrap();
    let session = spdy_client(&url, "portforward.k8s.io").await;
    let headers = |t: &str| {
        Headers::new()
            .with("streamType", t)
            .with("port", "80")
            .with("requestID", "0")
    };
    let mut error = session.open_stream(headers("error")).unwrap();
    let _data = session.open_stream(headers("data")).unwrap();
    let msg = read_all(&mut error).await;
    assert!(msg.contains("error forwarding port 80"), "{msg}");
    assert!(msg.contains("nopod"), "{msg}");
}

async fn ws_client(url: &str, protocol: &str) -> tokio_tungstenite::WebSocketStream<TcpStream> {
    let (host, _) = split_url(url);
    let tcp = TcpStream::connect(&host).await.unwrap();
    let mut request = url
        .replace("http://", "ws://")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", protocol.parse().unwrap());
    let (ws, response) = tokio_tungstenite::client_async(request, tcp).await.unwrap();
    assert_eq!(
        response.headers()["sec-websocket-protocol"]
            .to_str()
            .unwrap(),
        protocol
    );
    ws
}

/// Collects (channel, data) until the server closes.
async fn ws_drain(ws: &mut tokio_tungstenite::WebSocketStream<TcpStream>) -> Vec<(u8, Vec<u8>)> {
    let mut got = Vec::new();
    while let Some(Ok(m)) = ws.next().await {
        match m {
            Message::Binary(b) => got.push((b[0], b[1..].to_vec())),
            Message::Close(_) => break,
            _ => {}
        }
    }
    got
}

fn channel(got: &[(u8, Vec<u8>)], ch: u8) -> String {
    got.iter()
        .filter(|(c, _)| *c == ch)
        .flat_map(|(_, d)| d.clone())
        .map(char::from)
        .collect()
}

#[tokio::test]
async fn websocket_v5_close_signal_ends_stdin() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["cat"], true, true, false, false))
        .unwrap();
    let mut ws = ws_client(&url, "v5.channel.k8s.io").await;
    // Kubelet's announcement: an empty message on stdout.
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::Binary(vec![1].into())
    );
    ws.send(Message::Binary(b"\x00abc".to_vec().into()))
        .await
        .unwrap();
    ws.send(Message::Binary(vec![255, 0].into())).await.unwrap();
    let got = ws_drain(&mut ws).await;
    assert_eq!(channel(&got, 1), "abc");
    assert_eq!(channel(&got, 3), r#"{"metadata":{},"status":"Success"}"#);
}

#[tokio::test]
async fn websocket_v4_reports_the_exit_code() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["exit", "5"], false, true, true, false))
        .unwrap();
    let mut ws = ws_client(&url, "v4.channel.k8s.io").await;
    let got = ws_drain(&mut ws).await;
    assert_eq!(got[0], (1, vec![]));
    assert_eq!(channel(&got, 1), "out");
    assert_eq!(channel(&got, 2), "err");
    let status: serde_json::Value = serde_json::from_str(&channel(&got, 3)).unwrap();
    assert_eq!(status["details"]["causes"][0]["message"], "5");
}

#[tokio::test]
async fn websocket_resize_and_base64() {
    let h = harness().await;
    let url = h
        .server
        .exec_url(exec(&["resize"], true, true, false, true))
        .unwrap();
    let mut ws = ws_client(&url, "v4.base64.channel.k8s.io").await;
    // '4' + base64 of {"Width":3,"Height":2}
    use base64::Engine;
    let size = base64::engine::general_purpose::STANDARD.encode(br#"{"Width":3,"Height":2}"#);
    ws.send(Message::Text(format!("4{size}").into()))
        .await
        .unwrap();
    let mut stdout = Vec::new();
    let mut status = String::new();
    while let Some(Ok(m)) = ws.next().await {
        if let Message::Text(t) = m {
            let data = base64::engine::general_purpose::STANDARD
                .decode(&t.as_bytes()[1..])
                .unwrap();
            match t.as_bytes()[0] {
                b'1' => stdout.extend(data),
                b'3' => status.push_str(&String::from_utf8(data).unwrap()),
                _ => {}
            }
        }
    }
    assert_eq!(stdout, b"3x2");
    assert!(status.contains("Success"));
}

#[tokio::test]
async fn websocket_tunnelled_spdy_port_forward() {
    let h = harness().await;
    let url = h.server.port_forward_url("pod1").unwrap();
    let ws = ws_client(&url, "SPDY/3.1+portforward.k8s.io").await;
    let (session, _incoming) =
        Session::start(WsTunnel::new(ws), Role::Client, SessionConfig::default());
    forward_twice(&session).await;
}

#[tokio::test]
async fn a_client_that_opens_too_few_streams_is_disconnected() {
    let h = harness_with(StreamServerConfig {
        stream_creation_timeout: Duration::from_millis(200),
        ..StreamServerConfig::default()
    })
    .await;
    let url = h
        .server
        .exec_url(exec(&["exit", "0"], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    // Only the error stream; the server waits for stdout too, then gives up.
    let mut error = open(&session, "error");
    session.closed().await;
    assert_eq!(read_all(&mut error).await, "");
}

#[tokio::test]
async fn idle_sessions_are_closed_and_their_exec_dropped() {
    let h = harness_with(StreamServerConfig {
        idle_timeout: Duration::from_millis(300),
        ..StreamServerConfig::default()
    })
    .await;
    let url = h
        .server
        .exec_url(exec(&["hang"], false, true, false, false))
        .unwrap();
    let session = spdy_client(&url, "v4.channel.k8s.io").await;
    let _error = open(&session, "error");
    let mut stdout = open(&session, "stdout");
    let mut started = [0u8; 7];
    stdout.reader.read_exact(&mut started).await.unwrap();
    // No traffic from here on: the server closes the session.
    session.closed().await;
    assert_eq!(h.dropped.lock().await.recv().await, Some(()));
}
