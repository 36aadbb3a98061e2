//! Exec sessions: a process started in the running container whose stdout
//! and stderr the shim collects, killed at its deadline, answered to the
//! client that asked once it exited and its output ended.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use berth_shim_api::protocol::{ExecRequest, ExecResult, DEFAULT_EXEC_OUTPUT_LIMIT};
use libcontainer::oci_spec::runtime::Process;

/// After the process exited, how long to wait for its output to end (a
/// child it left behind may hold the pipes open).
pub const OUTPUT_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExecRequestError {
    #[error("exec needs at least one argument")]
    NoArgs,
    #[error("env entry {0:?} is not KEY=VALUE")]
    BadEnv(String),
    #[error("working directory {0:?} is not absolute")]
    RelativeCwd(String),
}

/// The exec'd process: the container's process with the request's args,
/// and its env, cwd and user where given. Everything else (capabilities,
/// no_new_privs, rlimits, AppArmor profile, ...) stays the container's, as
/// with containerd's exec. Never a terminal.
pub fn resolve(req: &ExecRequest, container: &Process) -> Result<Process, ExecRequestError> {
    if req.args.is_empty() {
        return Err(ExecRequestError::NoArgs);
    }
    if let Some(bad) = req
        .env
        .iter()
        .find(|e| !matches!(e.split_once('='), Some((k, _)) if !k.is_empty()))
    {
        return Err(ExecRequestError::BadEnv(bad.clone()));
    }
    let mut p = container.clone();
    p.set_args(Some(req.args.clone()));
    let base_env = container.env().clone().unwrap_or_default();
    p.set_env(Some(merge_env(&base_env, &req.env)));
    match &req.cwd {
        Some(c) if c.starts_with('/') => {
            p.set_cwd(PathBuf::from(c));
        }
        Some(c) => return Err(ExecRequestError::RelativeCwd(c.clone())),
        None => {}
    }
    if let Some(u) = &req.user {
        let mut user = p.user().clone();
        user.set_uid(u.uid);
        user.set_gid(u.gid);
        user.set_additional_gids(Some(u.additional_gids.clone()));
        p.set_user(user);
    }
    p.set_terminal(Some(false));
    p.set_console_size(None);
    Ok(p)
}

/// `base` with `overrides` applied: a key already present keeps its place
/// and takes the new value; new keys are appended in order.
pub fn merge_env(base: &[String], overrides: &[String]) -> Vec<String> {
    let key = |e: &str| e.split_once('=').map_or(e, |(k, _)| k).to_string();
    let mut out: Vec<String> = base.to_vec();
    for o in overrides {
        let k = key(o);
        match out.iter_mut().find(|e| key(e) == k) {
            Some(slot) => *slot = o.clone(),
            None => out.push(o.clone()),
        }
    }
    out
}

/// One captured output stream, capped.
#[derive(Debug)]
struct Capture {
    file: File,
    data: Vec<u8>,
    limit: usize,
    truncated: bool,
    eof: bool,
}

impl Capture {
    fn new(fd: OwnedFd, limit: usize) -> Self {
        Self {
            file: File::from(fd),
            data: Vec::new(),
            limit,
            truncated: false,
            eof: false,
        }
    }

    fn read_available(&mut self) {
        let mut buf = [0u8; 16 * 1024];
        for _ in 0..64 {
            match self.file.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => {
                    let room = self.limit.saturating_sub(self.data.len());
                    self.data.extend_from_slice(&buf[..n.min(room)]);
                    self.truncated |= n > room;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }
}

/// Which of the session's two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecStream {
    Stdout,
    Stderr,
}

#[derive(Debug)]
pub struct ExecSession {
    pid: i32,
    stdout: Capture,
    stderr: Capture,
    deadline: Option<Instant>,
    timed_out: bool,
    exit: Option<(i32, Instant)>,
}

impl ExecSession {
    /// `stdout`/`stderr` are the non-blocking read ends of the process's pipes.
    pub fn new(
        pid: i32,
        stdout: OwnedFd,
        stderr: OwnedFd,
        timeout: Option<Duration>,
        limit: Option<usize>,
    ) -> Self {
        let limit = limit.unwrap_or(DEFAULT_EXEC_OUTPUT_LIMIT);
        Self {
            pid,
            stdout: Capture::new(stdout, limit),
            stderr: Capture::new(stderr, limit),
            // A deadline past what the clock can hold is no deadline: a
            // huge timeout must not panic the shim.
            deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
            timed_out: false,
            exit: None,
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn has_exited(&self) -> bool {
        self.exit.is_some()
    }

    /// The streams still open, for poll.
    pub fn open_streams(&self) -> Vec<(ExecStream, BorrowedFd<'_>)> {
        let mut v = Vec::new();
        if !self.stdout.eof {
            v.push((ExecStream::Stdout, self.stdout.file.as_fd()));
        }
        if !self.stderr.eof {
            v.push((ExecStream::Stderr, self.stderr.file.as_fd()));
        }
        v
    }

    pub fn on_readable(&mut self, stream: ExecStream) {
        match stream {
            ExecStream::Stdout => self.stdout.read_available(),
            ExecStream::Stderr => self.stderr.read_available(),
        }
    }

    pub fn on_exit(&mut self, exit_code: i32, now: Instant) {
        self.exit = Some((exit_code, now));
    }

    /// Kills the process (and its process group: libcontainer makes it a
    /// session leader) if it has not exited yet: nobody waits for its
    /// answer any more.
    pub fn kill(&mut self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(-self.pid), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }

    /// Enforces the deadline; true when it killed the process just now
    /// (the runtime may have more to kill: [`RuntimeBackend::kill_exec`]).
    ///
    /// Only the process, as containerd and CRI-O kill a timed-out exec:
    /// what it started finishes its step (a probe script's last line,
    /// begun before the deadline, still reaches the container's log), and
    /// the answer waits [`OUTPUT_GRACE`] at most for such children's output.
    ///
    /// [`RuntimeBackend::kill_exec`]: crate::backend::RuntimeBackend::kill_exec
    pub fn tick(&mut self, now: Instant) -> bool {
        if self.exit.is_none() && !self.timed_out && self.deadline.is_some_and(|d| now >= d) {
            tracing::info!(pid = self.pid, "exec timed out; killing it");
            self.timed_out = true;
            let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
            return true;
        }
        false
    }

    /// Exited, and its output ended (or the grace after the exit passed).
    pub fn is_done(&self, now: Instant) -> bool {
        match self.exit {
            Some((_, at)) => (self.stdout.eof && self.stderr.eof) || now >= at + OUTPUT_GRACE,
            None => false,
        }
    }

    /// When [`tick`](Self::tick) or [`is_done`](Self::is_done) may change.
    pub fn next_wakeup(&self) -> Option<Instant> {
        match self.exit {
            Some((_, at)) => Some(at + OUTPUT_GRACE),
            None if !self.timed_out => self.deadline,
            None => None,
        }
    }

    pub fn into_result(mut self) -> ExecResult {
        // whatever is still buffered in the pipes
        self.stdout.read_available();
        self.stderr.read_available();
        ExecResult {
            exit_code: self.exit.map(|(c, _)| c).unwrap_or(-1),
            stdout: self.stdout.data,
            stderr: self.stderr.data,
            timed_out: self.timed_out,
            stdout_truncated: self.stdout.truncated,
            stderr_truncated: self.stderr.truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_shim_api::protocol::ExecUser;
    use nix::fcntl::OFlag;
    use nix::unistd::pipe2;
    use std::io::Write;

    fn container() -> Process {
        serde_json::from_value(serde_json::json!({
            "user": {"uid": 1000, "gid": 1000, "additionalGids": [10]},
            "args": ["app"],
            "env": ["PATH=/bin", "A=0"],
            "cwd": "/app",
            "terminal": true,
            "capabilities": {"bounding": ["CAP_KILL"], "effective": ["CAP_KILL"]},
        }))
        .expect("process")
    }

    fn request(args: &[&str]) -> ExecRequest {
        ExecRequest {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec![],
            cwd: None,
            user: None,
            timeout_s: 0,
            max_output_bytes: None,
        }
    }

    #[test]
    fn the_container_process_is_the_base() {
        let p = resolve(&request(&["id"]), &container()).expect("resolve");
        assert_eq!(p.args().as_deref(), Some(&["id".to_string()][..]));
        assert_eq!(p.cwd(), &PathBuf::from("/app"));
        assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
        assert_eq!(p.user().additional_gids().as_deref(), Some(&[10][..]));
        assert_eq!(p.env(), container().env());
        assert_eq!(p.capabilities(), container().capabilities());
        assert_eq!(p.terminal(), Some(false));
        assert_eq!(p.no_new_privileges(), None);
    }

    #[test]
    fn request_overrides() {
        let mut r = request(&["id"]);
        r.env = vec!["A=1".into(), "B=x=y".into(), "C=".into()];
        r.cwd = Some("/tmp".into());
        r.user = Some(ExecUser {
            uid: 0,
            gid: 0,
            additional_gids: vec![],
        });
        let p = resolve(&r, &container()).expect("resolve");
        let env: Vec<&str> = p.env().iter().flatten().map(String::as_str).collect();
        assert_eq!(env, ["PATH=/bin", "A=1", "B=x=y", "C="]);
        assert_eq!(p.cwd(), &PathBuf::from("/tmp"));
        assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
        assert_eq!(p.user().additional_gids().as_deref(), Some(&[][..]));
    }

    #[test]
    fn invalid_requests() {
        let c = container();
        assert_eq!(resolve(&request(&[]), &c), Err(ExecRequestError::NoArgs));
        for bad in ["NOEQUALS", "=v"] {
            let mut r = request(&["x"]);
            r.env = vec![bad.into()];
            assert_eq!(resolve(&r, &c), Err(ExecRequestError::BadEnv(bad.into())));
        }
        let mut r = request(&["x"]);
        r.cwd = Some("rel".into());
        assert!(matches!(
            resolve(&r, &c),
            Err(ExecRequestError::RelativeCwd(_))
        ));
    }

    #[test]
    fn env_merge_keeps_order() {
        let base = vec!["A=1".to_string(), "B=2".to_string()];
        assert_eq!(
            merge_env(&base, &["B=3".into(), "C=4".into(), "A=5".into()]),
            ["A=5", "B=3", "C=4"]
        );
        assert_eq!(merge_env(&[], &[]), Vec::<String>::new());
    }

    fn pipe() -> (OwnedFd, File) {
        let (r, w) = pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).expect("pipe");
        (r, File::from(w))
    }

    #[test]
    fn session_collects_caps_and_finishes() {
        let (out_r, mut out_w) = pipe();
        let (err_r, err_w) = pipe();
        // a pid that is surely not ours to kill is never signalled: the
        // session exits before any deadline
        let mut s = ExecSession::new(i32::MAX, out_r, err_r, None, Some(4));
        out_w.write_all(b"hello").expect("write");
        s.on_readable(ExecStream::Stdout);
        drop(out_w);
        drop(err_w);
        s.on_readable(ExecStream::Stdout);
        s.on_readable(ExecStream::Stderr);
        let now = Instant::now();
        assert!(!s.is_done(now));
        s.on_exit(3, now);
        assert!(s.is_done(now));
        let r = s.into_result();
        assert_eq!(r.exit_code, 3);
        assert_eq!(r.stdout, b"hell");
        assert!(r.stdout_truncated);
        assert!(!r.stderr_truncated);
        assert!(!r.timed_out);
    }

    #[test]
    fn exit_without_eof_waits_for_the_grace() {
        let (out_r, _out_w) = pipe();
        let (err_r, _err_w) = pipe();
        let mut s = ExecSession::new(i32::MAX, out_r, err_r, None, None);
        let t0 = Instant::now();
        s.on_exit(0, t0);
        assert!(!s.is_done(t0));
        assert_eq!(s.next_wakeup(), Some(t0 + OUTPUT_GRACE));
        assert!(s.is_done(t0 + OUTPUT_GRACE));
    }

    #[test]
    fn a_timeout_past_the_clock_is_no_deadline() {
        let (out_r, _out_w) = pipe();
        let (err_r, _err_w) = pipe();
        let s = ExecSession::new(
            i32::MAX,
            out_r,
            err_r,
            Some(Duration::from_secs(i64::MAX as u64)),
            None,
        );
        assert_eq!(s.next_wakeup(), None);
        assert!(!s.is_done(Instant::now()));
    }

    #[test]
    fn deadline_marks_timed_out() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let (out_r, _out_w) = pipe();
        let (err_r, _err_w) = pipe();
        let pid = child.id() as i32;
        let mut s = ExecSession::new(pid, out_r, err_r, Some(Duration::from_millis(1)), None);
        std::thread::sleep(Duration::from_millis(5));
        s.tick(Instant::now());
        let status = child.wait().expect("wait");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9));
        s.on_exit(137, Instant::now());
        assert!(s.into_result().timed_out);
    }
}
