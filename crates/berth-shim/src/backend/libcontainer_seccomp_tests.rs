//! berth-spec writes `SCMP_CMP_MASKED_EQ` operands in the OCI order, and
//! the backend swaps them into the order libcontainer reads
//! ([`super::libcontainer_seccomp`]). Were the swap wrong, or libcontainer
//! to switch to the OCI order, the default profile's `clone` rule would
//! silently allow every namespace flag. These tests load the real default
//! profile, adapted as the backend adapts it, through libcontainer in a
//! child process and check what the kernel then does, so either fails
//! here.

use std::process::Command;

use berth_spec::capabilities::DEFAULT_CAPABILITIES;
use berth_spec::seccomp_default::default_profile;
use libcontainer::oci_spec::runtime::Capabilities;

/// Set in the child: it loads the profile and runs the checks.
const CHILD_ENV: &str = "BERTH_SECCOMP_ORDER_CHILD";
const CHILD_TEST: &str =
    "backend::libcontainer_spec::kernel_tests::child_under_the_default_profile";

#[test]
fn libcontainer_enforces_the_default_profiles_argument_rules() {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([CHILD_TEST, "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "child did not run:\n{text}");
}

/// Runs only as the child of the test above (it loads a seccomp filter
/// into its own thread, for good).
#[test]
#[ignore = "run by libcontainer_enforces_the_default_profiles_argument_rules"]
fn child_under_the_default_profile() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let caps: Capabilities = DEFAULT_CAPABILITIES.into_iter().collect();
    let profile = super::libcontainer_seccomp(&default_profile(&caps)).expect("adapted");
    nix::sys::prctl::set_no_new_privs().expect("no_new_privs");
    libcontainer::seccomp::initialize_seccomp(&profile).expect("load the default profile");

    // clone without namespace flags (a fork) is allowed...
    // SAFETY: raw clone without CLONE_VM is a fork; the child only _exits.
    let pid = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_clone,
            nix::libc::SIGCHLD as u64,
            0u64,
            0u64,
            0u64,
            0u64,
        )
    };
    if pid == 0 {
        // SAFETY: the forked child leaves at once, touching nothing.
        unsafe { nix::libc::_exit(0) };
    }
    assert!(
        pid > 0,
        "a plain clone was refused: {}",
        std::io::Error::last_os_error()
    );
    let mut status = 0;
    // SAFETY: waiting for the child made just above.
    unsafe { nix::libc::waitpid(pid as i32, &mut status, 0) };

    // ...and with CLONE_NEWUSER it is refused with EPERM.
    let flags = (nix::libc::CLONE_NEWUSER | nix::libc::SIGCHLD) as u64;
    // SAFETY: as above; if the filter let it through, the child _exits.
    let pid = unsafe { nix::libc::syscall(nix::libc::SYS_clone, flags, 0u64, 0u64, 0u64, 0u64) };
    if pid == 0 {
        // SAFETY: as above.
        unsafe { nix::libc::_exit(0) };
    }
    let err = std::io::Error::last_os_error();
    assert_eq!(
        pid, -1,
        "clone(CLONE_NEWUSER) was allowed under the default profile"
    );
    assert_eq!(err.raw_os_error(), Some(nix::libc::EPERM), "{err}");

    // socket: AF_VSOCK is refused, AF_UNIX is not.
    // SAFETY: plain socket(2) calls; a returned fd is closed.
    let vsock = unsafe { nix::libc::socket(nix::libc::AF_VSOCK, nix::libc::SOCK_STREAM, 0) };
    let err = std::io::Error::last_os_error();
    assert_eq!(vsock, -1, "socket(AF_VSOCK) was allowed");
    assert_eq!(err.raw_os_error(), Some(nix::libc::EPERM), "{err}");
    // SAFETY: as above.
    let unix = unsafe { nix::libc::socket(nix::libc::AF_UNIX, nix::libc::SOCK_STREAM, 0) };
    assert!(
        unix >= 0,
        "socket(AF_UNIX) was refused: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: closing the fd just made.
    unsafe { nix::libc::close(unix) };
}
