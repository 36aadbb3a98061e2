//! Becoming a daemon, and the readiness handshake with berthd.
//!
//! berthd runs the shim and reads its stdout until end of file. The process
//! berthd started (the *launcher*) forks the *daemon* and waits for the
//! daemon to report over a private pipe, relays that one line to stdout and
//! exits. Why the fork: libcontainer's init keeps a copy of every fd the
//! creating process had until it execs the payload (at `start`), so if the
//! daemon itself held berthd's pipe, berthd would see EOF only after start.
//! The daemon points its own stdio at /dev/null and `<dir>/shim.log` before it
//! creates anything, so no container process ever holds berthd's pipes.
//!
//! The daemon calls `setsid` (out of berthd's session and process group:
//! a signal to berthd's group does not reach it) and becomes child
//! subreaper, so orphans of the container are reparented to it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, getpid, getppid, pipe2, setsid, ForkResult, Pid};

use crate::reaper::exit_code;
use berth_shim_api::protocol::Ready;

/// Where the daemon reports readiness: the write end of the private pipe.
pub struct ReadyPipe(File);

impl ReadyPipe {
    /// Sends the one line. Consumes the pipe: the daemon closes its end.
    /// From here the daemon outlives the launcher.
    pub fn send(mut self, ready: &Ready) {
        if let Err(err) = nix::sys::prctl::set_pdeathsig(None) {
            tracing::warn!(%err, "cannot clear the parent-death signal");
        }
        let mut line = serde_json::to_vec(ready).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        line.push(b'\n');
        if let Err(err) = self.0.write_all(&line) {
            tracing::warn!(%err, "cannot report readiness (launcher gone?)");
        }
    }
}

/// Forks. In the launcher, relays the daemon's line to stdout and returns
/// the launcher's exit code (`Err`); in the daemon returns the pipe (`Ok`).
pub fn fork_daemon() -> Result<ReadyPipe, i32> {
    let (r, w) = match pipe2(OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(err) => return Err(report(&failure(format!("pipe: {err}")))),
    };
    let launcher = getpid();
    // SAFETY: the shim is single-threaded here (nothing has spawned a
    // thread), so the child may run arbitrary code after fork.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(r);
            // Until it reports, the daemon dies with the launcher: berthd
            // kills the launcher (the pid it knows) when a create hangs,
            // and that must not leave a hung daemon behind.
            if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid() != launcher {
                std::process::exit(1);
            }
            Ok(ReadyPipe(File::from(w)))
        }
        Ok(ForkResult::Parent { child }) => {
            drop(w);
            Err(relay(r, child))
        }
        Err(err) => Err(report(&failure(format!("fork: {err}")))),
    }
}

/// Makes the launcher die with berthd (`parent`), and through it the
/// daemon until it reports: berthd's next start undoes a create it never
/// recorded, and a shim still creating then would make again what that
/// undo removed (the container's cgroup). Fails if berthd is gone already.
pub fn die_with(parent: i32) -> Result<(), i32> {
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err() || getppid().as_raw() != parent {
        return Err(report(&failure(format!("berthd (pid {parent}) is gone"))));
    }
    Ok(())
}

/// Reports a failure that happened before the fork; the launcher's exit code.
pub fn report_failure(error: String) -> i32 {
    report(&failure(error))
}

fn failure(error: String) -> Ready {
    Ready {
        ok: false,
        pid: None,
        shim_pid: None,
        error: Some(error),
    }
}

/// Prints the line on stdout; the exit code the launcher should use.
fn report(ready: &Ready) -> i32 {
    let mut out = io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, ready);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
    if !ready.ok {
        if let Some(e) = &ready.error {
            eprintln!("berth-shim: {e}");
        }
    }
    if ready.ok {
        0
    } else {
        1
    }
}

/// Waits for the daemon's line (not for EOF: a created container's init
/// still holds a copy of the pipe), or for the daemon to die.
fn relay(r: OwnedFd, daemon: Pid) -> i32 {
    let mut file = File::from(r);
    let mut buf = Vec::new();
    loop {
        let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(200u16));
        if matches!(ready, Ok(n) if n > 0) {
            let mut chunk = [0u8; 4096];
            match file.read(&mut chunk) {
                Ok(0) => return report(&failure(daemon_died(daemon, None))),
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.iter().position(|&b| b == b'\n') {
                        return match serde_json::from_slice::<Ready>(&buf[..i]) {
                            Ok(ready) => report(&ready),
                            Err(e) => report(&failure(format!("bad readiness line: {e}"))),
                        };
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return report(&failure(format!("reading readiness: {e}"))),
            }
        }
        if let Ok(status) = waitpid(daemon, Some(WaitPidFlag::WNOHANG)) {
            if status != WaitStatus::StillAlive {
                return report(&failure(daemon_died(daemon, exit_code(status))));
            }
        }
    }
}

fn daemon_died(daemon: Pid, code: Option<i32>) -> String {
    match code {
        Some(c) => format!(
            "shim daemon {daemon} exited ({c}) before the container was created; see shim.log"
        ),
        None => format!(
            "shim daemon {daemon} closed the readiness pipe without reporting; see shim.log"
        ),
    }
}

/// Detaches the daemon: new session, child subreaper, cwd `/`, stdin from
/// /dev/null, stdout and stderr appended to `log`.
pub fn detach(log: &Path) -> io::Result<()> {
    setsid().map_err(io::Error::from)?;
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)?;
    std::env::set_current_dir("/")?;
    let null = File::open("/dev/null")?;
    let log = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(log)?;
    nix::unistd::dup2_stdin(&null).map_err(io::Error::from)?;
    nix::unistd::dup2_stdout(&log).map_err(io::Error::from)?;
    nix::unistd::dup2_stderr(&log).map_err(io::Error::from)?;
    Ok(())
}

/// How long the daemon waits to hand its last answer over before exiting.
pub const FINAL_FLUSH: Duration = Duration::from_secs(2);
