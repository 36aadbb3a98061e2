//! Reaping children: the container init, exec processes, and whatever the
//! kernel reparents to the shim as child subreaper.

use std::os::fd::{AsFd, BorrowedFd};

use nix::errno::Errno;
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Where the shim's loop learns that children exited.
pub trait Children {
    /// Readable when a child may have exited.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Every child that exited since the last call, without blocking.
    fn reap(&mut self) -> Vec<Reaped>;
}

/// The shim's own children: SIGCHLD, blocked and read from a signalfd
/// ([`crate::setup::sigchld_fd`]), then `waitpid` for every one.
pub struct SigchldChildren(SignalFd);

impl SigchldChildren {
    pub fn new(sigfd: SignalFd) -> Self {
        Self(sigfd)
    }
}

impl Children for SigchldChildren {
    fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    fn reap(&mut self) -> Vec<Reaped> {
        while let Ok(Some(_)) = self.0.read_signal() {}
        reap_all()
    }
}

/// A child that exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub pid: i32,
    pub exit_code: i32,
}

/// The exit code runc and containerd report: the status of a normal exit,
/// 128+signal for a death by signal.
pub fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Reaps every child that has exited, without blocking.
pub fn reap_all() -> Vec<Reaped> {
    let mut out = Vec::new();
    loop {
        match waitpid(
            Pid::from_raw(-1),
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Ok(status) => {
                if let (Some(pid), Some(code)) = (status.pid(), exit_code(status)) {
                    out.push(Reaped {
                        pid: pid.as_raw(),
                        exit_code: code,
                    });
                }
            }
            Err(Errno::EINTR) => continue,
            Err(err) => {
                tracing::warn!(%err, "waitpid failed");
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;

    #[test]
    fn exit_codes_like_runc() {
        let pid = Pid::from_raw(7);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 3)), Some(3));
        assert_eq!(exit_code(WaitStatus::Exited(pid, 0)), Some(0));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGKILL, false)),
            Some(137)
        );
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGTERM, true)),
            Some(143)
        );
        assert_eq!(exit_code(WaitStatus::StillAlive), None);
        assert_eq!(exit_code(WaitStatus::Stopped(pid, Signal::SIGSTOP)), None);
    }
}
