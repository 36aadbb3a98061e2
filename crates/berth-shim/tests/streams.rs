//! Interactive exec sessions and attach, end to end, as root, with real
//! libcontainer containers.

mod support;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use berth_shim_api::attach::{encode, Decoder, Frame};
use berth_shim_api::client::{open_session, Session, SessionError};
use berth_shim_api::protocol::{
    ErrorCode, Request, Response, RunState, SessionFd, SessionRequest, SignalArg,
};
use berth_shim_api::pty::set_window_size;
use support::{alive, wait_until, Options, TestContainer};

const T: Duration = Duration::from_secs(20);

fn request(args: &[&str], tty: bool, stdin: bool, stdout: bool, stderr: bool) -> SessionRequest {
    SessionRequest {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        cwd: None,
        user: None,
        tty,
        stdin,
        stdout,
        stderr,
    }
}

fn session(c: &TestContainer, req: &SessionRequest) -> Session {
    open_session(&c.socket(), req, Some(T)).expect("session")
}

/// Reads `fd` to its end on a thread (a pty master's EIO counts as the end).
fn read_all(fd: OwnedFd) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut f = File::from(fd);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(out);
    });
    rx
}

fn wait_exit(mut s: Session) -> i32 {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(s.wait_exit());
    });
    rx.recv_timeout(T)
        .expect("exit within the limit")
        .expect("exited line")
}

fn running(opts: Options) -> TestContainer {
    let c = TestContainer::create(opts);
    c.start();
    c
}

#[test]
fn pipe_session_with_stdin_stdout_stderr_and_exit_code() {
    let c = running(Options::new(&["sleep", "100"]));
    let mut s = session(
        &c,
        &request(
            &["sh", "-c", "cat; echo err >&2; exit 7"],
            false,
            true,
            true,
            true,
        ),
    );
    assert_eq!(
        s.fds.iter().map(|f| f.0).collect::<Vec<_>>(),
        [SessionFd::Stdin, SessionFd::Stdout, SessionFd::Stderr]
    );
    let out = read_all(s.take(SessionFd::Stdout).expect("stdout"));
    let err = read_all(s.take(SessionFd::Stderr).expect("stderr"));
    let mut stdin = File::from(s.take(SessionFd::Stdin).expect("stdin"));
    stdin.write_all(b"hello\n").expect("write stdin");
    // stdin EOF ends cat
    drop(stdin);
    assert_eq!(out.recv_timeout(T).expect("stdout"), b"hello\n");
    assert_eq!(err.recv_timeout(T).expect("stderr"), b"err\n");
    assert_eq!(wait_exit(s), 7);
}

#[test]
fn streams_not_asked_for_are_dev_null_and_signals_give_128_plus() {
    let c = running(Options::new(&["sleep", "100"]));
    // no stdin: cat reads /dev/null and ends at once; no stderr fd
    let mut s = session(
        &c,
        &request(
            &["sh", "-c", "cat; echo lost >&2; echo done"],
            false,
            false,
            true,
            false,
        ),
    );
    assert_eq!(s.fds.len(), 1);
    let out = read_all(s.take(SessionFd::Stdout).expect("stdout"));
    assert_eq!(out.recv_timeout(T).expect("stdout"), b"done\n");
    assert_eq!(wait_exit(s), 0);

    let s = session(
        &c,
        &request(&["sh", "-c", "kill -TERM $$"], false, false, false, false),
    );
    assert!(s.fds.is_empty());
    assert_eq!(wait_exit(s), 143);
}

#[test]
fn tty_session_with_resize() {
    let c = running(Options::new(&["sleep", "100"]));
    let mut s = session(
        &c,
        &request(
            &["sh", "-c", "read x; stty size; echo got:$x $TERM; exit 3"],
            true,
            true,
            true,
            false,
        ),
    );
    let master = s.take(SessionFd::Pty).expect("pty master");
    assert!(s.fds.is_empty());
    set_window_size(master.as_fd(), 100, 40).expect("resize");
    let mut writer = File::from(master.try_clone().expect("dup"));
    let out = read_all(master);
    writer.write_all(b"hi\n").expect("type");
    let code = wait_exit(s);
    drop(writer);
    let text = String::from_utf8_lossy(&out.recv_timeout(T).expect("output")).to_string();
    assert!(text.contains("40 100"), "{text:?}");
    assert!(text.contains("got:hi xterm"), "{text:?}");
    assert_eq!(code, 3);
}

#[test]
fn closing_the_session_kills_the_process() {
    let c = running(Options::new(&["sleep", "100"]));
    let s = session(&c, &request(&["sleep", "1000"], false, true, true, true));
    let pid = s.pid;
    assert!(alive(pid));
    drop(s);
    wait_until(T, || !alive(pid));

    // same for a tty session whose client keeps nothing
    let s = session(&c, &request(&["sleep", "1000"], true, true, true, false));
    let pid = s.pid;
    assert!(alive(pid));
    drop(s);
    wait_until(T, || !alive(pid));

    // the shim serves on, and the container still runs
    assert_eq!(c.state().status, RunState::Running);
    let s = session(&c, &request(&["true"], false, false, false, false));
    assert_eq!(wait_exit(s), 0);
}

#[test]
fn session_needs_a_running_container() {
    let c = TestContainer::create(Options::new(&["sleep", "100"]));
    match open_session(
        &c.socket(),
        &request(&["true"], false, false, false, false),
        Some(T),
    ) {
        Err(SessionError::Refused { code, .. }) => assert_eq!(code, ErrorCode::NotRunning),
        other => panic!("{other:?}"),
    }
    c.start();
    match open_session(
        &c.socket(),
        &request(&[], false, false, false, false),
        Some(T),
    ) {
        Err(SessionError::Refused { code, .. }) => assert_eq!(code, ErrorCode::BadRequest),
        other => panic!("{other:?}"),
    }
}

/// A blocking attach client for tests.
struct Attacher {
    stream: UnixStream,
    decoder: Decoder,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exited: Option<i32>,
    eof: bool,
}

impl Attacher {
    fn connect(c: &TestContainer) -> Self {
        let stream = UnixStream::connect(c.attach_socket()).expect("connect attach.sock");
        stream.set_read_timeout(Some(T)).expect("timeout");
        Self {
            stream,
            decoder: Decoder::new(),
            stdout: Vec::new(),
            stderr: Vec::new(),
            exited: None,
            eof: false,
        }
    }

    fn send(&mut self, frame: Frame) {
        let mut out = Vec::new();
        encode(&frame, &mut out);
        self.stream.write_all(&out).expect("send frame");
    }

    /// Reads frames until `done` holds (fails the test at the read timeout).
    fn read_until(&mut self, mut done: impl FnMut(&Self) -> bool) {
        let mut buf = [0u8; 8192];
        while !done(self) {
            while let Some(f) = self.decoder.next_frame().expect("valid frame") {
                match f {
                    Frame::Stdout(d) => self.stdout.extend_from_slice(&d),
                    Frame::Stderr(d) => self.stderr.extend_from_slice(&d),
                    Frame::Exited(code) => self.exited = Some(code),
                    other => panic!("unexpected frame {other:?}"),
                }
            }
            if done(self) {
                return;
            }
            assert!(!self.eof, "attach closed early");
            let n = self
                .stream
                .read(&mut buf)
                .expect("read attach (timed out?)");
            if n == 0 {
                self.eof = true;
            }
            self.decoder.push(&buf[..n]);
        }
    }

    fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).to_string()
    }
}

#[test]
fn two_attachers_share_output_and_detaching_keeps_the_container() {
    let mut o = Options::new(&[
        "sh",
        "-c",
        "while read l; do echo out:$l; echo err:$l >&2; done",
    ]);
    o.stdin = true;
    let c = TestContainer::create(o);
    let mut a = Attacher::connect(&c);
    let mut b = Attacher::connect(&c);
    c.start();
    a.send(Frame::Stdin(b"one\n".to_vec()));
    for x in [&mut a, &mut b] {
        x.read_until(|x| x.stdout == b"out:one\n" && x.stderr == b"err:one\n");
    }
    // a detaches (and its stdin ending does not close the container's:
    // no stdin_once)
    a.send(Frame::StdinClose);
    drop(a);
    b.send(Frame::Stdin(b"two\n".to_vec()));
    b.read_until(|x| x.stdout_text().contains("out:two\n"));
    assert_eq!(c.state().status, RunState::Running);

    // a late attacher gets what comes after it joined
    let mut late = Attacher::connect(&c);
    b.send(Frame::Stdin(b"three\n".to_vec()));
    late.read_until(|x| x.stdout_text().contains("out:three\n"));
    assert!(!late.stdout_text().contains("two"));

    assert_eq!(
        c.call(&Request::Kill {
            signal: SignalArg::Number(9),
            all: false
        }),
        Response::Ok
    );
    for x in [&mut b, &mut late] {
        x.read_until(|x| x.exited.is_some() && x.eof);
        assert_eq!(x.exited, Some(137));
    }
    let log = c.log();
    for want in [
        "stdout F out:one",
        "stderr F err:one",
        "stdout F out:two",
        "stdout F out:three",
    ] {
        assert!(log.contains(want), "{want:?} not in the log:\n{log}");
    }
}

#[test]
fn stdin_once_closes_stdin_after_the_first_attacher() {
    let mut o = Options::new(&["sh", "-c", "cat; echo done; exit 5"]);
    o.stdin = true;
    o.stdin_once = true;
    let c = running(o);
    let mut a = Attacher::connect(&c);
    a.send(Frame::Stdin(b"x\n".to_vec()));
    a.send(Frame::StdinClose);
    a.read_until(|x| x.exited.is_some() && x.eof);
    assert_eq!(a.stdout, b"x\ndone\n");
    assert_eq!(a.exited, Some(5));
    c.wait_stopped(T);
    // attaching to a stopped container: the exit, then the end
    let mut late = Attacher::connect(&c);
    late.read_until(|x| x.exited.is_some() && x.eof);
    assert_eq!(late.exited, Some(5));
    assert!(late.stdout.is_empty());
}

#[test]
fn tty_attach_with_resize() {
    let mut o = Options::new(&["sh", "-c", "read x; stty size; echo got:$x"]);
    o.tty = true;
    o.stdin = true;
    let c = running(o);
    let mut a = Attacher::connect(&c);
    a.send(Frame::Resize {
        width: 100,
        height: 40,
    });
    a.send(Frame::Stdin(b"go\n".to_vec()));
    a.read_until(|x| x.exited.is_some() && x.eof);
    let text = a.stdout_text();
    assert!(text.contains("40 100"), "{text:?}");
    assert!(text.contains("got:go"), "{text:?}");
    assert!(a.stderr.is_empty());
    assert_eq!(a.exited, Some(0));
    let log = c.log();
    assert!(log.contains("stdout F got:go"), "{log}");
}

#[test]
fn an_attacher_that_never_reads_blocks_nothing() {
    // about 8 MiB of output, more than an attacher may leave unread
    let c = TestContainer::create(Options::new(&[
        "sh",
        "-c",
        "i=0; while [ $i -lt 4096 ]; do head -c 2047 /dev/zero | tr '\\0' x; echo; i=$((i+1)); done; echo end",
    ]));
    let stuck = UnixStream::connect(c.attach_socket()).expect("connect");
    c.start();
    let s = c.wait_stopped(Duration::from_secs(120));
    assert_eq!(s.exit_code, Some(0));
    let log = c.log();
    assert!(
        log.ends_with("stdout F end\n"),
        "log tail: {:?}",
        &log[log.len().saturating_sub(80)..]
    );
    assert_eq!(log.lines().count(), 4097);
    drop(stuck);
}
