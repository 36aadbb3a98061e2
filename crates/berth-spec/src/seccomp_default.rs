//! berth's `RuntimeDefault` seccomp profile: an allow-list in the shape of
//! Docker's and containerd's default.
//!
//! Every syscall not listed fails with EPERM. The base list is what
//! ordinary programs use; kernel-administration calls (mount, module
//! loading, clock setting, namespace creation, ...) are allowed only to a
//! container that holds the capability that would let it use them anyway,
//! so the profile narrows the kernel's attack surface without taking away
//! what the capabilities grant. Syscalls newer than the profile (and than
//! the host's libseccomp) are left out: runtimes skip names libseccomp does
//! not know (with a warning per name and per container).
//!
//! Three rules take arguments, as in Docker's and containerd's profiles:
//! - `personality` only for the harmless personas (Linux, 32-bit emulation,
//!   `uname -r` 2.6 emulation, and the query `0xffffffff`);
//! - `socket` for every address family but `AF_VSOCK`, which reaches the
//!   hypervisor and other VMs' vsock services from a guest node;
//! - `clone` without CAP_SYS_ADMIN only without namespace flags; `clone3`,
//!   whose flags sit in memory seccomp cannot read, fails with ENOSYS so
//!   that libc falls back to `clone`.

use std::collections::BTreeSet;

use oci_spec::runtime::{
    Arch, Capabilities, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg,
    LinuxSeccompArgBuilder, LinuxSeccompOperator, LinuxSyscall,
};

/// EPERM, the default action's errno.
const EPERM: u32 = 1;
/// ENOSYS, for `clone3`.
const ENOSYS: u32 = 38;

/// AF_VSOCK, the one address family `socket` refuses.
pub const AF_VSOCK: u64 = 40;

/// CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
/// | CLONE_NEWNET | CLONE_NEWCGROUP: the flags that create namespaces.
pub const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// Syscalls every container may make, by theme. Names of other
/// architectures (`chown32`, `_llseek`, ...) are listed too: the filter
/// also covers the compatibility architectures of [`native_architectures`].
const BASE: &[&[&str]] = &[
    FILES, PROCESSES, IDENTITY, MEMORY, SIGNALS, TIME, EVENTS, NETWORK, IPC,
];

#[rustfmt::skip]
const FILES: &[&str] = &[
    "access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range",
    "creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
    "fallocate", "fchdir", "fchmod", "fchmodat", "fchown", "fchown32", "fchownat", "fcntl",
    "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fremovexattr", "fsetxattr",
    "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64",
    "futimesat", "getcwd", "getdents", "getdents64", "getxattr", "ioctl", "lchown", "lchown32",
    "lgetxattr", "link", "linkat", "listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek",
    "lsetxattr", "lstat", "lstat64", "mkdir", "mkdirat", "mknod", "mknodat", "newfstatat", "open",
    "openat", "openat2", "pipe", "pipe2", "pread64", "preadv", "preadv2", "pwrite64", "pwritev",
    "pwritev2", "read", "readahead", "readlink", "readlinkat", "readv", "removexattr", "rename",
    "renameat", "renameat2", "rmdir", "sendfile", "sendfile64", "setxattr", "splice", "stat",
    "stat64", "statfs", "statfs64", "statx", "symlink", "symlinkat", "sync", "sync_file_range",
    "syncfs", "tee", "truncate", "truncate64", "umask", "unlink", "unlinkat", "utime",
    "utimensat", "utimensat_time64", "utimes", "vmsplice", "write", "writev",
    "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
    "io_setup", "io_submit", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self",
];

#[rustfmt::skip]
const PROCESSES: &[&str] = &[
    "arch_prctl", "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork",
    "getcpu", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom", "getrlimit",
    "get_robust_list", "getrusage", "getsid", "get_thread_area", "gettid", "ioprio_get",
    "ioprio_set", "membarrier", "pidfd_open", "pidfd_send_signal", "prctl", "prlimit64",
    "process_mrelease", "process_vm_readv", "process_vm_writev", "ptrace", "restart_syscall",
    "rseq", "sched_getaffinity", "sched_getattr", "sched_getparam", "sched_get_priority_max",
    "sched_get_priority_min", "sched_getscheduler", "sched_rr_get_interval",
    "sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
    "sched_setscheduler", "sched_yield", "seccomp", "setpgid", "setpriority", "setrlimit",
    "set_robust_list", "setsid", "set_thread_area", "set_tid_address", "sysinfo", "ugetrlimit",
    "uname", "vfork", "wait4", "waitid", "waitpid",
];

#[rustfmt::skip]
const IDENTITY: &[&str] = &[
    "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32", "getgroups",
    "getgroups32", "getresgid", "getresgid32", "getresuid", "getresuid32", "getuid", "getuid32",
    "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
    "setgroups32", "setregid", "setregid32", "setresgid", "setresgid32", "setresuid",
    "setresuid32", "setreuid", "setreuid32", "setuid", "setuid32",
];

#[rustfmt::skip]
const MEMORY: &[&str] = &[
    "brk", "futex", "futex_time64", "futex_waitv", "madvise", "memfd_create", "memfd_secret",
    "mincore", "mlock", "mlock2", "mlockall", "mmap", "mmap2", "mprotect", "mremap", "msync",
    "munlock", "munlockall", "munmap", "pkey_alloc", "pkey_free", "pkey_mprotect",
    "remap_file_pages",
];

#[rustfmt::skip]
const SIGNALS: &[&str] = &[
    "kill", "pause", "rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
    "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64",
    "rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4", "sigprocmask", "sigreturn",
    "tgkill", "tkill",
];

#[rustfmt::skip]
const TIME: &[&str] = &[
    "adjtimex", "alarm", "clock_adjtime", "clock_adjtime64", "clock_getres",
    "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
    "clock_nanosleep_time64", "getitimer", "gettimeofday", "nanosleep", "setitimer", "time",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime", "timer_gettime64",
    "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime",
    "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
];

#[rustfmt::skip]
const EVENTS: &[&str] = &[
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
    "epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "fanotify_mark",
    "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch", "_newselect",
    "poll", "ppoll", "ppoll_time64", "pselect6", "pselect6_time64", "select",
];

#[rustfmt::skip]
const NETWORK: &[&str] = &[
    "accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
    "listen", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send", "sendmmsg",
    "sendmsg", "sendto", "setsockopt", "shutdown", "socketcall", "socketpair",
];

#[rustfmt::skip]
const IPC: &[&str] = &[
    "ipc", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
    "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd",
    "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "shmat", "shmctl", "shmdt",
    "shmget",
];

/// `modify_ldt` exists (and is needed by some 32-bit programs) on x86 only.
#[cfg(target_arch = "x86_64")]
const ARCH_SPECIFIC: &[&str] = &["modify_ldt"];
#[cfg(not(target_arch = "x86_64"))]
const ARCH_SPECIFIC: &[&str] = &[];

/// Syscalls allowed to holders of a capability, as in Docker's profile.
#[rustfmt::skip]
const BY_CAPABILITY: &[(Capability, &[&str])] = &[
    (Capability::DacReadSearch, &["open_by_handle_at"]),
    (
        Capability::SysAdmin,
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    (Capability::SysBoot, &["reboot"]),
    (Capability::SysChroot, &["chroot"]),
    (
        Capability::SysModule,
        &["delete_module", "init_module", "finit_module"],
    ),
    (Capability::SysPacct, &["acct"]),
    (
        Capability::SysPtrace,
        &["kcmp", "pidfd_getfd", "process_madvise"],
    ),
    (Capability::SysRawio, &["iopl", "ioperm"]),
    (
        Capability::SysTime,
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    (Capability::SysTtyConfig, &["vhangup"]),
    (
        Capability::SysNice,
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    (Capability::Syslog, &["syslog"]),
    (Capability::Bpf, &["bpf"]),
    (Capability::Perfmon, &["perf_event_open"]),
];

/// `personality(2)` values allowed: PER_LINUX, PER_LINUX32, UNAME26,
/// UNAME26|PER_LINUX32, and 0xffffffff (query the current persona).
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// The seccomp architectures of this machine: the native one first, then
/// the compatibility ones a binary may still call through.
pub fn native_architectures() -> Vec<Arch> {
    match std::env::consts::ARCH {
        "x86_64" => vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32],
        "aarch64" => vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm],
        _ => Vec::new(),
    }
}

/// The default profile for a container holding `capabilities`.
pub fn default_profile(capabilities: &Capabilities) -> LinuxSeccomp {
    let mut allowed: BTreeSet<&str> = BASE
        .iter()
        .flat_map(|group| group.iter())
        .chain(ARCH_SPECIFIC)
        .copied()
        .collect();
    for (capability, names) in BY_CAPABILITY {
        if capabilities.contains(capability) {
            allowed.extend(names.iter().copied());
        }
    }
    // One unconditional rule, so no name is ever listed twice.
    let mut syscalls = vec![rule(
        allowed.iter().copied(),
        LinuxSeccompAction::ScmpActAllow,
        None,
        None,
    )];
    for persona in PERSONALITIES {
        let arg = argument(0, persona, None, LinuxSeccompOperator::ScmpCmpEq);
        syscalls.push(rule(
            ["personality"],
            LinuxSeccompAction::ScmpActAllow,
            None,
            Some(vec![arg]),
        ));
    }
    let not_vsock = argument(0, AF_VSOCK, None, LinuxSeccompOperator::ScmpCmpNe);
    syscalls.push(rule(
        ["socket"],
        LinuxSeccompAction::ScmpActAllow,
        None,
        Some(vec![not_vsock]),
    ));
    if !allowed.contains("clone") {
        let arg = masked_equal(0, CLONE_NAMESPACE_FLAGS, 0);
        syscalls.push(rule(
            ["clone"],
            LinuxSeccompAction::ScmpActAllow,
            None,
            Some(vec![arg]),
        ));
    }
    if !allowed.contains("clone3") {
        syscalls.push(rule(
            ["clone3"],
            LinuxSeccompAction::ScmpActErrno,
            Some(ENOSYS),
            None,
        ));
    }
    let mut seccomp = LinuxSeccomp::default();
    let architectures = native_architectures();
    seccomp
        .set_default_action(LinuxSeccompAction::ScmpActErrno)
        .set_default_errno_ret(Some(EPERM))
        .set_architectures((!architectures.is_empty()).then_some(architectures))
        .set_syscalls(Some(syscalls));
    seccomp
}

/// "`arg & mask == value`" in the OCI order: the mask in `value`, the
/// compared value in `valueTwo`, as runc, crun and libseccomp's
/// `SCMP_CMP_MASKED_EQ` (`datum_a`, `datum_b`) have them. A runtime that
/// reads them the other way round adapts the spec itself (berth-shim's
/// backends).
pub fn masked_equal(index: usize, mask: u64, value: u64) -> LinuxSeccompArg {
    argument(
        index,
        mask,
        Some(value),
        LinuxSeccompOperator::ScmpCmpMaskedEq,
    )
}

fn argument(
    index: usize,
    value: u64,
    value_two: Option<u64>,
    op: LinuxSeccompOperator,
) -> LinuxSeccompArg {
    let mut builder = LinuxSeccompArgBuilder::default()
        .index(index)
        .value(value)
        .op(op);
    if let Some(value_two) = value_two {
        builder = builder.value_two(value_two);
    }
    // The type has no setters; its builder cannot fail (every field has a default).
    builder.build().unwrap_or_default()
}

fn rule<'a>(
    names: impl IntoIterator<Item = &'a str>,
    action: LinuxSeccompAction,
    errno: Option<u32>,
    args: Option<Vec<LinuxSeccompArg>>,
) -> LinuxSyscall {
    let mut syscall = LinuxSyscall::default();
    syscall
        .set_names(names.into_iter().map(str::to_string).collect())
        .set_action(action)
        .set_errno_ret(errno)
        .set_args(args);
    syscall
}

#[cfg(test)]
#[path = "seccomp_default_tests.rs"]
mod tests;
