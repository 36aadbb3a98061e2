//! libcontainer's `Executor` for berth: the last code of the init and of
//! every exec'd process before `execvp`.
//!
//! - libcontainer runs the payload with `execvp` from its own cloned child
//!   and never resets the signal state it inherited from the shim. The shim
//!   blocks SIGCHLD (for its signalfd) and, like every Rust program, ignores
//!   SIGPIPE; both survive `execve`. [`CleanExecutor`] restores default
//!   dispositions and an empty mask just before the exec.
//! - Env values that are not UTF-8 (the bundle's `raw-env`): libcontainer
//!   takes the env as `String`s, so the exact bytes are set here.
//! - The tenant (exec) builder drops the container's seccomp profile and
//!   never joins the container's user namespace: both are done here.

use std::collections::HashMap;
use std::ffi::OsString;

use libcontainer::oci_spec::runtime::{LinuxSeccomp, Spec};
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{
    Executor, ExecutorError, ExecutorSetEnvsError, ExecutorValidationError,
};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};

use crate::exec_userns::{self, JoinUserns};

/// The default executor, after restoring the signal state a fresh process
/// would have, and (for exec processes) loading the container's seccomp
/// filter; env values that are not UTF-8 are set from the bundle's
/// `raw-env` ([`berth_shim_api::raw_env`]).
#[derive(Clone, Default)]
pub struct CleanExecutor {
    /// For exec processes: the container's filter, in libcontainer's
    /// operand order.
    pub seccomp: Option<LinuxSeccomp>,
    pub raw_env: Vec<(OsString, OsString)>,
    /// For exec processes of a container in a user namespace: joining it.
    pub userns: Option<JoinUserns>,
}

impl Executor for CleanExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        reset_signal_state();
        // Before the seccomp filter, which may refuse setns.
        if let Some(join) = &self.userns {
            exec_userns::join(join)?;
        }
        if let Some(seccomp) = &self.seccomp {
            load_seccomp(seccomp)?;
        }
        DefaultExecutor {}.exec(spec)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        DefaultExecutor {}.validate(spec)
    }

    fn setup_envs(&self, envs: HashMap<String, String>) -> Result<(), ExecutorSetEnvsError> {
        let mut envs = envs;
        if let Some(join) = &self.userns {
            join.fix_home(&mut envs);
        }
        let exact = exact_values(&envs, &self.raw_env);
        DefaultExecutor {}.setup_envs(envs)?;
        for (key, value) in exact {
            // SAFETY: this is libcontainer's init (or tenant) child, single
            // threaded, between its own setup_envs and the exec: no other
            // thread reads the environment.
            unsafe { std::env::set_var(key, value) };
        }
        Ok(())
    }
}

/// The raw entries whose approximation is still what `envs` holds: an
/// exec that sets the key itself, or libcontainer's own `HOME`, wins.
fn exact_values<'a>(
    envs: &HashMap<String, String>,
    raw: &'a [(OsString, OsString)],
) -> Vec<&'a (OsString, OsString)> {
    raw.iter()
        .filter(|(key, value)| {
            envs.get(key.to_string_lossy().as_ref())
                .is_some_and(|current| *current == value.to_string_lossy())
        })
        .collect()
}

/// libcontainer's tenant builder rebuilds `linux` from the namespaces and
/// the cgroup only, so an exec'd process would run without the container's
/// seccomp profile. We load it here, the last thing before `execvp`. By now
/// the capabilities are already the container's: without CAP_SYS_ADMIN the
/// kernel accepts a filter only under no_new_privs, so then we set it
/// (runc instead loads the filter before it drops capabilities; libcontainer
/// gives us no hook there). Profiles with a notify action are not loaded:
/// they need a listener berth does not provide.
fn load_seccomp(seccomp: &LinuxSeccomp) -> Result<(), ExecutorError> {
    use libcontainer::seccomp::initialize_seccomp;
    if libcontainer::seccomp::is_notify(seccomp) {
        return Ok(());
    }
    if initialize_seccomp(seccomp).is_ok() {
        return Ok(());
    }
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| ExecutorError::Other(format!("setting no_new_privs for seccomp: {e}")))?;
    initialize_seccomp(seccomp)
        .map(drop)
        .map_err(|e| ExecutorError::Other(format!("loading the container's seccomp profile: {e}")))
}

/// Every signal back to its default disposition, none blocked. Ignored
/// dispositions survive `execve`: the shim ignores SIGPIPE (Rust does), and
/// whoever started berthd may have left others ignored (a shell's
/// background job ignores SIGINT and SIGQUIT, for one).
fn reset_signal_state() {
    // The kernel's `struct sigaction` with every field zero is SIG_DFL, no
    // flags, empty mask. Going through the raw syscall also reaches the
    // signals glibc reserves (32, 33), which its wrapper refuses.
    let default_action = [0u64; 4];
    for sig in 1..=64 {
        if sig == Signal::SIGKILL as i32 || sig == Signal::SIGSTOP as i32 {
            continue;
        }
        // SAFETY: rt_sigaction reads 32 bytes from a live buffer of that
        // size; the old-action pointer is null. No handler is installed.
        unsafe {
            nix::libc::syscall(
                nix::libc::SYS_rt_sigaction,
                sig,
                default_action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}

#[cfg(test)]
mod raw_env_tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    #[test]
    fn raw_values_replace_only_their_own_approximation() {
        let raw = vec![
            (
                OsString::from("BIN"),
                OsString::from_vec(b"a\xffz".to_vec()),
            ),
            (
                OsString::from("SET_BY_EXEC"),
                OsString::from_vec(vec![0xfe]),
            ),
        ];
        let envs = HashMap::from([
            ("BIN".to_string(), "a\u{fffd}z".to_string()),
            ("SET_BY_EXEC".to_string(), "plain".to_string()),
        ]);
        let exact: Vec<&OsString> = exact_values(&envs, &raw)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(exact, [&OsString::from("BIN")]);
    }
}
