//! Process handles through pidfd_open(2): a pidfd refers to one process for
//! as long as it is open, whatever the kernel does with its pid later, and
//! polls readable once that process has exited (a zombie included).

use std::os::fd::{AsFd, FromRawFd, OwnedFd, RawFd};

/// A pidfd of the process `pid` now is, or None: no such process, no fd
/// left, or a kernel without pidfd_open (before 5.3).
pub fn open(pid: i32) -> Option<OwnedFd> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open(2) takes a pid and flags, returns a new
    // close-on-exec fd or -1, and touches no memory of ours.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    let fd = RawFd::try_from(fd).ok()?;
    // SAFETY: the fd was just opened and nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the pidfd's process has exited. An error counts as exited: a
/// caller then only looks again the slow way.
pub fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    !matches!(
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
        Ok(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_tells_when_its_process_exits() {
        let mut child =
            crate::test_child::TestChild::spawn(std::process::Command::new("sleep").arg("100"));
        let fd = open(child.id() as i32).expect("a pidfd of a live child");
        assert!(!exited(&fd));
        child.kill().unwrap();
        // Still a zombie until waited for: exited all the same.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(exited(&fd));
        child.wait().unwrap();
        assert!(exited(&fd));
        assert!(open(0).is_none() && open(-1).is_none());
    }
}
