//! The pod's infra process: PID 1 of the pod's PID namespace.
//!
//! It is forked (berth-pinns is single-threaded, so forking is safe) rather
//! than exec'd, so it needs no binary inside its empty root. It chroots into
//! that root, drops every capability by changing to an unprivileged user
//! with an empty bounding set, and then only waits: reaping the zombies
//! that PID 1 inherits, and exiting on SIGTERM or SIGINT.
//!
//! Inside the pod it shows as `/pause` (as the pause container does), not
//! as berth-pinns with host paths in its arguments: its command line is
//! moved to a page of its own before it gives up its capabilities.

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

    // A kernel without CONFIG_CHECKPOINT_RESTORE leaves the old command
    // line: cosmetic, not fatal.
    let _ = show_as_pause();

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

/// What `ps` shows for the infra process, NUL-terminated.
const PAUSE_CMDLINE: &[u8] = b"/pause\0";

/// The kernel's `struct prctl_mm_map` (linux/prctl.h), which the libc
/// crate does not define.
#[repr(C)]
struct MmMap {
    start_code: u64,
    end_code: u64,
    start_data: u64,
    end_data: u64,
    start_brk: u64,
    brk: u64,
    start_stack: u64,
    arg_start: u64,
    arg_end: u64,
    env_start: u64,
    env_end: u64,
    auxv: u64,
    auxv_size: u32,
    exe_fd: u32,
}

/// Points the kernel's idea of this process's argument area at a fresh
/// page holding `/pause`, and sets its name to `pause`. Overwriting argv in
/// place would keep berth-pinns' length (trailing NULs show as blanks).
/// PR_SET_MM_MAP, unlike PR_SET_MM_ARG_START, needs no CAP_SYS_RESOURCE
/// (which some nodes' root lacks); it resets every field, so the others
/// are read back from /proc/self/stat first.
fn show_as_pause() -> Result<(), PinError> {
    let _ = prctl::set_name(c"pause");
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|err| PinError::Invalid(format!("read /proc/self/stat: {err}")))?;
    let mut map = mm_map_from_stat(&stat)
        .ok_or_else(|| PinError::Invalid("unreadable /proc/self/stat".into()))?;
    // SAFETY: sbrk(0) only reports the current program break.
    map.brk = unsafe { nix::libc::sbrk(0) } as u64;

    let len = std::num::NonZeroUsize::new(4096).ok_or(PinError::Invalid("page".into()))?;
    // SAFETY: a fresh anonymous private mapping (the kernel reads command
    // lines only from anonymous memory), never unmapped: it is read for as
    // long as the process lives.
    let page = unsafe {
        nix::sys::mman::mmap_anonymous(
            None,
            len,
            nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
            nix::sys::mman::MapFlags::MAP_PRIVATE,
        )
    }
    .map_err(sys("mmap"))?;
    let start = page.as_ptr() as *mut u8;
    // SAFETY: the page is 4096 writable bytes, the text far fewer.
    unsafe { std::ptr::copy_nonoverlapping(PAUSE_CMDLINE.as_ptr(), start, PAUSE_CMDLINE.len()) };
    map.arg_start = start as u64;
    map.arg_end = map.arg_start + PAUSE_CMDLINE.len() as u64;

    // SAFETY: the kernel copies exactly size_of::<MmMap>() bytes from `map`.
    let result = unsafe {
        nix::libc::prctl(
            nix::libc::PR_SET_MM,
            nix::libc::PR_SET_MM_MAP,
            &map as *const MmMap,
            std::mem::size_of::<MmMap>(),
            0,
        )
    };
    nix::errno::Errno::result(result)
        .map(drop)
        .map_err(sys("PR_SET_MM_MAP"))
}

/// The memory layout fields of `/proc/<pid>/stat` (proc(5): fields 26-28
/// and 45-51), with the argument area as it is; `brk` is left 0 (the file
/// only has its start). None when the line is not what the kernel writes.
fn mm_map_from_stat(stat: &str) -> Option<MmMap> {
    // The name (field 2) may hold spaces and parentheses: fields are
    // counted from after its last ')', where field 3 starts.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3. Only addresses are parsed: other fields may be
    // negative (nice) or above i64 (rsslim).
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(MmMap {
        start_code: field(26)?,
        end_code: field(27)?,
        start_stack: field(28)?,
        start_data: field(45)?,
        end_data: field(46)?,
        start_brk: field(47)?,
        brk: 0,
        arg_start: field(48)?,
        arg_end: field(49)?,
        env_start: field(50)?,
        env_end: field(51)?,
        auxv: 0,
        auxv_size: 0,
        exe_fd: u32::MAX,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_read_after_the_last_parenthesis() {
        let mut line = String::from("42 (a) b) (c) S");
        for n in 4..=52 {
            line.push_str(&format!(" {n}"));
        }
        let map = mm_map_from_stat(&line).expect("parsed");
        assert_eq!(
            (map.start_code, map.end_code, map.start_stack),
            (26, 27, 28)
        );
        assert_eq!((map.start_data, map.end_data, map.start_brk), (45, 46, 47));
        assert_eq!((map.arg_start, map.arg_end), (48, 49));
        assert_eq!((map.env_start, map.env_end), (50, 51));
        assert_eq!(map.exe_fd, u32::MAX, "the exe file is left alone");
    }

    #[test]
    fn a_short_or_garbled_line_is_refused() {
        assert!(mm_map_from_stat("42 (a) S 1 2 3").is_none());
        assert!(mm_map_from_stat("no parenthesis").is_none());
        let mut line = String::from("42 (a) S");
        for n in 4..=52 {
            line.push_str(if n == 48 { " x" } else { " -1" });
        }
        assert!(mm_map_from_stat(&line).is_none());
    }
}
