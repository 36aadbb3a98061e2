//! The pod's infra process: PID 1 of the pod's PID namespace.
//!
//! It is forked (berth-pinns is single-threaded, so forking is safe) rather
//! than exec'd, so it needs no binary inside its empty root. It chroots into
//! that root, drops every capability by changing to an unprivileged user
//! with an empty bounding set, and then only waits: reaping the zombies
//! that PID 1 inherits, and exiting on SIGTERM or SIGINT.

use std::path::Path;

use nix::sys::prctl;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{chdir, chroot, fork, setgroups, setresgid, setresuid, ForkResult, Gid, Uid};

use crate::{sys, PinError};

/// Highest capability number to drop from the bounding set; dropping past
/// the kernel's last one fails with EINVAL, which ends the loop.
const MAX_CAPABILITY: i32 = 63;

/// Forks the infra process (already inside the new PID namespace, where it
/// is PID 1) and returns its pid as seen from the caller's namespace.
pub fn start(root: &Path, id: u32) -> Result<i32, PinError> {
    // SAFETY: the caller is single-threaded, so the child cannot inherit a
    // lock held by another thread; the child only makes syscalls.
    match unsafe { fork() }.map_err(sys("fork infra"))? {
        ForkResult::Parent { child } => Ok(child.as_raw()),
        ForkResult::Child => {
            let code = match become_infra(root, id) {
                Ok(never) => match never {},
                Err(_) => 1,
            };
            std::process::exit(code)
        }
    }
}

enum Never {}

fn become_infra(root: &Path, id: u32) -> Result<Never, PinError> {
    // Block the signals we wait for before anything can send them. PID 1
    // of a namespace never even receives a signal left at its default
    // action, so each also gets a handler, which never runs: sigwait takes
    // the signal first.
    let mut waited = SigSet::empty();
    for signal in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT] {
        waited.add(signal);
    }
    waited.thread_block().map_err(sys("block signals"))?;
    let action = SigAction::new(
        SigHandler::Handler(ignore),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in waited.iter() {
        // SAFETY: the handler is async-signal-safe: it does nothing.
        unsafe { sigaction(signal, &action) }.map_err(sys("sigaction"))?;
    }

    // Drop the caller's stdio: whoever waits for berth-pinns' output must
    // see it end when berth-pinns exits, not when the pod does.
    let null = nix::fcntl::open(
        "/dev/null",
        nix::fcntl::OFlag::O_RDWR,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(sys("open /dev/null"))?;
    for target in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors of this single-threaded child.
        let result = unsafe { nix::libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), target) };
        nix::errno::Errno::result(result).map_err(sys("redirect stdio"))?;
    }
    drop(null);
    // Nothing else of its parent's: with a user namespace, that parent
    // holds the pipes it reports to berth-pinns on.
    // SAFETY: close_range takes integers and touches no memory.
    let closed = unsafe { nix::libc::syscall(nix::libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    nix::errno::Errno::result(closed).map_err(sys("close_range"))?;

    chroot(root).map_err(sys("chroot"))?;
    chdir("/").map_err(sys("chdir"))?;
    for capability in 0..=MAX_CAPABILITY {
        if drop_bounding(capability).is_err() {
            break;
        }
    }
    prctl::set_no_new_privs().map_err(sys("no_new_privs"))?;
    setgroups(&[]).map_err(sys("setgroups"))?;
    let (uid, gid) = (Uid::from_raw(id), Gid::from_raw(id));
    setresgid(gid, gid, gid).map_err(sys("setresgid"))?;
    // Leaving uid 0 clears the permitted, effective and ambient sets.
    setresuid(uid, uid, uid).map_err(sys("setresuid"))?;

    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => reap_all(),
            Ok(Signal::SIGTERM | Signal::SIGINT) => std::process::exit(0),
            _ => {}
        }
    }
}

extern "C" fn ignore(_: nix::libc::c_int) {}

fn drop_bounding(capability: i32) -> nix::Result<()> {
    // SAFETY: PR_CAPBSET_DROP takes an integer and touches no memory.
    let result = unsafe { nix::libc::prctl(nix::libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
    nix::errno::Errno::result(result).map(drop)
}

fn reap_all() {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
