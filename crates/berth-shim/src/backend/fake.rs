//! A runtime that runs nothing, for tests of the shim's loop without root:
//! exits, exit publishing, kills, exec and attach.
//!
//! Its "processes" are pids no kernel hands out (above `PID_MAX_LIMIT`,
//! 2^22), so a signal the shim sends one directly reaches nobody. The
//! init's stdio is the pipes the shim gave [`RuntimeBackend::create`];
//! the test writes the init's output through [`Fake::write_init`] and ends
//! it with [`Fake::exit_init`], which closes them as the kernel would and
//! reports the exit through [`FakeChildren`], the loop's source of exits.
//!
//! An exec'd process writes its arguments, joined by spaces, and a newline
//! to stdout, `err` to stderr, and exits with its last argument when that
//! is a number (else 0).

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use nix::fcntl::OFlag;

use super::{BackendError, ExecProcess, InitStdio, RuntimeBackend, RuntimeStatus};
use crate::reaper::{Children, Reaped};

/// The first pid the fake gives out.
pub const FIRST_PID: i32 = 1 << 23;

/// Signals that end the fake init (their default action kills).
const FATAL: [i32; 4] = [2, 9, 15, 1];

#[derive(Default)]
struct State {
    next_pid: i32,
    init: Option<i32>,
    /// stdin, stdout, stderr as the runtime got them, until the init exits.
    init_stdio: Option<[OwnedFd; 3]>,
    started: bool,
    init_exited: bool,
    deleted: bool,
    /// Every kill the shim asked for: (signal, all).
    kills: Vec<(i32, bool)>,
    execs: usize,
    exits: VecDeque<Reaped>,
    /// The write end of [`FakeChildren`]'s pipe.
    wake: Option<OwnedFd>,
}

impl State {
    fn pid(&mut self) -> i32 {
        let pid = FIRST_PID + self.next_pid;
        self.next_pid += 1;
        pid
    }

    fn exited(&mut self, pid: i32, exit_code: i32) {
        self.exits.push_back(Reaped { pid, exit_code });
        if let Some(wake) = &self.wake {
            let _ = nix::unistd::write(wake, b"x");
        }
    }

    fn end_init(&mut self, code: i32) {
        if self.init_exited {
            return;
        }
        let Some(pid) = self.init else { return };
        self.init_exited = true;
        self.init_stdio = None;
        self.exited(pid, code);
    }
}

/// The test's handle on the fake runtime.
#[derive(Clone)]
pub struct Fake(Arc<Mutex<State>>);

/// The fake's side of the shim: its backend.
pub struct FakeBackend(Fake);

/// The fake's side of the shim: where its exits come from.
pub struct FakeChildren {
    fake: Fake,
    wake: OwnedFd,
}

impl Fake {
    pub fn new() -> (Fake, FakeBackend, FakeChildren) {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).expect("pipe");
        let fake = Fake(Arc::new(Mutex::new(State {
            wake: Some(w),
            ..State::default()
        })));
        let children = FakeChildren {
            fake: fake.clone(),
            wake: r,
        };
        (fake.clone(), FakeBackend(fake), children)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The init writes `data` to its stdout (1) or stderr (2).
    pub fn write_init(&self, fd: usize, data: &[u8]) {
        let state = self.state();
        let stdio = state.init_stdio.as_ref().expect("the init's stdio");
        let mut out = std::fs::File::from(stdio[fd].try_clone().expect("dup"));
        out.write_all(data).expect("write the init's output");
    }

    /// The init exits with `code`: its stdio closes, the exit is reported.
    pub fn exit_init(&self, code: i32) {
        self.state().end_init(code);
    }

    /// Reports an exit of `pid` again, which no kernel does: the shim must
    /// not publish a second exit.
    pub fn report_again(&self, pid: i32, code: i32) {
        self.state().exited(pid, code);
    }

    pub fn init_pid(&self) -> Option<i32> {
        self.state().init
    }

    pub fn kills(&self) -> Vec<(i32, bool)> {
        self.state().kills.clone()
    }

    pub fn execs(&self) -> usize {
        self.state().execs
    }

    pub fn deleted(&self) -> bool {
        self.state().deleted
    }
}

impl Children for FakeChildren {
    fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    fn reap(&mut self) -> Vec<Reaped> {
        let mut buf = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut buf), Ok(n) if n > 0) {}
        self.fake.state().exits.drain(..).collect()
    }
}

impl RuntimeBackend for FakeBackend {
    fn create(&mut self, _bundle: &Path, stdio: InitStdio) -> Result<i32, BackendError> {
        let mut state = self.0.state();
        let InitStdio::Pipes {
            stdin,
            stdout,
            stderr,
        } = stdio
        else {
            return Err(BackendError::Message("the fake has no terminals".into()));
        };
        let pid = state.pid();
        state.init = Some(pid);
        state.init_stdio = Some([stdin, stdout, stderr]);
        Ok(pid)
    }

    fn start(&mut self) -> Result<(), BackendError> {
        let mut state = self.0.state();
        if state.init.is_none() || state.started {
            return Err(BackendError::Message("not created".into()));
        }
        state.started = true;
        Ok(())
    }

    fn state(&mut self) -> Result<RuntimeStatus, BackendError> {
        let state = self.0.state();
        Ok(match (state.init_exited, state.started) {
            (true, _) => RuntimeStatus::Stopped,
            (false, true) => RuntimeStatus::Running,
            (false, false) => RuntimeStatus::Created,
        })
    }

    fn kill(&mut self, signal: i32, all: bool) -> Result<(), BackendError> {
        let mut state = self.0.state();
        state.kills.push((signal, all));
        if FATAL.contains(&signal) {
            state.end_init(128 + signal);
        }
        Ok(())
    }

    fn delete(&mut self, _force: bool) -> Result<(), BackendError> {
        self.0.state().deleted = true;
        Ok(())
    }

    fn exec(
        &mut self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        _console: Option<&Path>,
    ) -> Result<i32, BackendError> {
        let args = process.process.args().clone().unwrap_or_default();
        let code = args.last().and_then(|a| a.parse().ok()).unwrap_or(0);
        let [_stdin, stdout, stderr] = stdio;
        let mut line = args.join(" ");
        line.push('\n');
        let write = |fd: OwnedFd, data: &[u8]| {
            std::fs::File::from(fd)
                .write_all(data)
                .map_err(|e| BackendError::io("the fake exec's output", e))
        };
        write(stdout, line.as_bytes())?;
        write(stderr, b"err")?;
        let mut state = self.0.state();
        state.execs += 1;
        let pid = state.pid();
        state.exited(pid, code);
        Ok(pid)
    }

    fn checkpoint(&mut self, _images: &Path, _work: &Path) -> Result<(), BackendError> {
        Err(BackendError::Message("the fake cannot checkpoint".into()))
    }

    fn restore(
        &mut self,
        _input: &crate::checkpoint::RestoreInput<'_>,
    ) -> Result<i32, BackendError> {
        Err(BackendError::Message("the fake cannot restore".into()))
    }
}
