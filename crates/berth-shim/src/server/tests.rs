//! The loop against the fake runtime (`backend::fake`): a real server on
//! real sockets in a thread, no root, no container.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Parser;

use super::Server;
use crate::backend::fake::{Fake, FIRST_PID};
use crate::cli::Args;
use crate::setup::{self, ShimConfig};
use berth_shim_api::attach::{Decoder, Frame};
use berth_shim_api::client::Client;
use berth_shim_api::protocol::{
    ErrorCode, ExecRequest, ExitRecord, Request, Response, RunState, SignalArg, StateInfo,
};

/// How long a test waits for what must happen before it fails (never a
/// measure of speed).
const PATIENCE: Duration = Duration::from_secs(20);

struct Shim {
    _tmp: tempfile::TempDir,
    fake: Fake,
    dir: PathBuf,
    log: PathBuf,
    thread: Option<JoinHandle<i32>>,
}

impl Shim {
    /// A created container whose init has its own PID namespace.
    fn start() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bundle = tmp.path().join("bundle");
        std::fs::create_dir(&bundle).expect("bundle");
        std::fs::write(
            bundle.join("config.json"),
            r#"{"ociVersion": "1.2.0",
                "process": {"args": ["app"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
                "root": {"path": "rootfs"},
                "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]}}"#,
        )
        .expect("config.json");
        let dir = tmp.path().join("shim");
        let log = tmp.path().join("c.log");
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = Args::parse_from([
            "berth-shim".to_string(),
            "--id=c1".into(),
            format!("--bundle={}", path(&bundle)),
            format!("--state-root={}", path(&tmp.path().join("state"))),
            format!("--dir={}", path(&dir)),
            format!("--log={}", path(&log)),
        ]);
        let cfg = ShimConfig::from_args(&args).expect("config");
        let (fake, backend, children) = Fake::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let created = setup::create(&cfg, |_| Box::new(backend)).expect("create");
            let listener = setup::listen(&cfg.files).expect("listen");
            let attach = setup::listen_attach(&cfg.files).expect("listen attach");
            let server = Server::new(cfg, created, listener, attach, Box::new(children));
            ready_tx.send(()).expect("ready");
            server.run()
        });
        ready_rx.recv_timeout(PATIENCE).expect("the shim is ready");
        Shim {
            _tmp: tmp,
            fake,
            dir,
            log,
            thread: Some(thread),
        }
    }

    fn call(&self, request: &Request) -> Response {
        let mut client = Client::connect(&self.dir.join("shim.sock"), Some(PATIENCE))
            .expect("connect to shim.sock");
        client.call(request).expect("an answer")
    }

    fn state(&self) -> StateInfo {
        match self.call(&Request::State) {
            Response::State(s) => s,
            other => panic!("state answered {other:?}"),
        }
    }

    fn wait_stopped(&self) -> StateInfo {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let state = self.state();
            if state.status == RunState::Stopped {
                return state;
            }
            assert!(Instant::now() < deadline, "never stopped: {state:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn exit_file(&self) -> PathBuf {
        self.dir.join("exit")
    }

    /// Shuts the shim down; its exit code.
    fn shutdown(mut self) -> i32 {
        assert_eq!(self.call(&Request::Shutdown), Response::Ok);
        let thread = self.thread.take().expect("running");
        thread.join().expect("the loop does not panic")
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            if !thread.is_finished() {
                // A failed test: end the loop rather than leave it serving.
                self.fake.exit_init(137);
                let _ = Client::connect(&self.dir.join("shim.sock"), Some(PATIENCE))
                    .and_then(|mut c| c.call(&Request::Shutdown));
            }
            let _ = thread.join();
        }
    }
}

fn kill(signal: i32, all: bool) -> Request {
    Request::Kill {
        signal: SignalArg::Number(signal),
        all,
    }
}

fn exec(args: &[&str]) -> Request {
    Request::Exec(ExecRequest {
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![],
        cwd: None,
        user: None,
        timeout_s: 0,
        max_output_bytes: None,
    })
}

#[test]
fn the_inits_exit_is_published_once_after_its_output() {
    let shim = Shim::start();
    let pid = shim.fake.init_pid().expect("created");
    assert!(pid >= FIRST_PID);
    assert_eq!(shim.state().status, RunState::Created);
    assert_eq!(shim.call(&Request::Start), Response::Ok);
    assert_eq!(shim.state().status, RunState::Running);
    assert!(!shim.exit_file().exists());

    shim.fake.write_init(1, b"last words\n");
    shim.fake.exit_init(3);
    let stopped = shim.wait_stopped();
    assert_eq!(stopped.exit_code, Some(3));
    let published = std::fs::read(shim.exit_file()).expect("the exit file");
    let record: ExitRecord = serde_json::from_slice(&published).expect("an exit record");
    assert_eq!(record.exit_code, 3);
    assert!(!record.oom_killed);
    assert_eq!(Some(record.exited_at.clone()), stopped.exited_at);
    // Whoever sees the exit finds the output before it in the log.
    let log = std::fs::read_to_string(&shim.log).expect("the log");
    assert!(log.contains(" stdout F last words"), "{log}");
    let inode = std::fs::metadata(shim.exit_file()).unwrap().ino();

    // Another exit of the same pid (a kernel never reports one) changes
    // nothing: the answer to the next request comes after it was reaped.
    shim.fake.report_again(pid, 9);
    let again = shim.state();
    assert_eq!(again.exit_code, Some(3));
    assert_eq!(again.exited_at, stopped.exited_at);
    assert_eq!(std::fs::read(shim.exit_file()).unwrap(), published);
    assert_eq!(std::fs::metadata(shim.exit_file()).unwrap().ino(), inode);

    assert_eq!(shim.fake.kills(), [], "an init with its own PID namespace");
    let fake = shim.fake.clone();
    assert_eq!(shim.shutdown(), 0);
    assert!(fake.deleted());
    assert_eq!(fake.kills(), [], "nothing left to kill at shutdown");
}

#[test]
fn a_kill_reaches_the_runtime_and_its_exit_is_128_plus_the_signal() {
    let shim = Shim::start();
    assert_eq!(shim.call(&Request::Start), Response::Ok);
    assert_eq!(shim.call(&kill(15, false)), Response::Ok);
    assert_eq!(shim.wait_stopped().exit_code, Some(143));
    assert_eq!(shim.fake.kills(), [(15, false)]);
    shim.shutdown();
}

#[test]
fn a_kill_of_an_exited_container_never_signals_its_init() {
    let shim = Shim::start();
    assert_eq!(shim.call(&Request::Start), Response::Ok);
    shim.fake.exit_init(0);
    assert_eq!(shim.wait_stopped().exit_code, Some(0));
    // Its pid may be another process's by now.
    match shim.call(&kill(9, false)) {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::NotRunning),
        other => panic!("kill of an exited init answered {other:?}"),
    }
    assert_eq!(shim.fake.kills(), []);
    // Every process of the container: through the runtime (its cgroup).
    assert_eq!(shim.call(&kill(9, true)), Response::Ok);
    assert_eq!(shim.fake.kills(), [(9, true)]);
    assert_eq!(shim.state().exit_code, Some(0), "the exit stays the init's");
    // A created container that was never started cannot be started now.
    match shim.call(&Request::Start) {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::NotRunning),
        other => panic!("start after the exit answered {other:?}"),
    }
    shim.shutdown();
}

#[test]
fn exec_answers_with_the_processes_exit_code_and_output() {
    let shim = Shim::start();
    match shim.call(&exec(&["true"])) {
        Response::Error { code, .. } => assert_eq!(code, ErrorCode::NotRunning),
        other => panic!("exec before start answered {other:?}"),
    }
    assert_eq!(shim.fake.execs(), 0);
    assert_eq!(shim.call(&Request::Start), Response::Ok);
    for (args, code) in [
        (&["exit", "7"][..], 7),
        (&["true"][..], 0),
        (&["x", "255"][..], 255),
    ] {
        match shim.call(&exec(args)) {
            Response::Exec(result) => {
                assert_eq!(result.exit_code, code, "{args:?}");
                assert_eq!(result.stdout, format!("{}\n", args.join(" ")).as_bytes());
                assert_eq!(result.stderr, b"err");
                assert!(!result.timed_out);
            }
            other => panic!("exec {args:?} answered {other:?}"),
        }
    }
    assert_eq!(shim.fake.execs(), 3);
    // An exec's exit is not the container's.
    assert_eq!(shim.state().status, RunState::Running);
    assert!(!shim.exit_file().exists());
    let fake = shim.fake.clone();
    assert_eq!(shim.shutdown(), 0);
    // Shutdown killed the running init through the runtime.
    assert_eq!(fake.kills().first(), Some(&(9, false)));
}

/// Reads attach frames until `want` says stop; every frame read.
fn read_frames(stream: &mut UnixStream, want: impl Fn(&Frame) -> bool) -> Vec<Frame> {
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut decoder = Decoder::new();
    let mut frames = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(frame) = decoder.next_frame().expect("a frame") {
            let done = want(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
        let n = stream.read(&mut buf).expect("attach output");
        assert!(n > 0, "attach closed early: {frames:?}");
        decoder.push(&buf[..n]);
    }
}

#[test]
fn attachers_get_the_output_and_the_exit() {
    let shim = Shim::start();
    assert_eq!(shim.call(&Request::Start), Response::Ok);
    let mut attacher = UnixStream::connect(shim.dir.join("attach.sock")).expect("attach");
    // Answered after the loop saw the attacher connect (see the module docs
    // of attach_hub: only output after that reaches it).
    shim.state();
    shim.fake.write_init(1, b"to stdout\n");
    let frames = read_frames(&mut attacher, |f| matches!(f, Frame::Stdout(_)));
    assert_eq!(frames, [Frame::Stdout(b"to stdout\n".to_vec())]);
    shim.fake.write_init(2, b"to stderr\n");
    shim.fake.exit_init(42);
    let frames = read_frames(&mut attacher, |f| matches!(f, Frame::Exited(_)));
    assert_eq!(
        frames,
        [Frame::Stderr(b"to stderr\n".to_vec()), Frame::Exited(42)]
    );
    assert_eq!(shim.wait_stopped().exit_code, Some(42));
    shim.shutdown();
}
