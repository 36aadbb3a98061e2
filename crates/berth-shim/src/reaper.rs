//! Reaping children: the container init, exec processes, and whatever the
//! kernel reparents to the shim as child subreaper.

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

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
