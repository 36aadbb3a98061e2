//! The libcontainer calls the shim makes, in one place.
//!
//! Quirks handled here:
//! - libcontainer runs the payload with `execvp` from its own cloned child
//!   and never resets the signal state it inherited from the shim. The shim
//!   blocks SIGCHLD (for its signalfd) and, like every Rust program, ignores
//!   SIGPIPE; both survive `execve`. [`CleanExecutor`] restores default
//!   dispositions and an empty mask just before the exec.
//! - The init is cloned with `CLONE_PARENT` by libcontainer's intermediate
//!   process, so it is the shim's direct child; so is every exec process.
//! - `build()` consumes the stdio fds we hand it and closes its copies when
//!   it returns, so the shim keeps only the read ends.
//! - `build()` sets the process's oom_score_adj on the shim itself; it is
//!   put back ([`crate::own_oom_score`]).
//! - The tenant (exec) builder leaves a notify socket file behind per exec,
//!   drops the container's seccomp profile (see [`CleanExecutor`]), and
//!   never joins the container's user namespace ([`exec_userns`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::{Container, ContainerStatus};
use libcontainer::error::LibcontainerError;
use libcontainer::oci_spec::runtime::{LinuxSeccomp, Process, Spec};
use libcontainer::syscall::syscall::SyscallType;
use libcontainer::workload::default::DefaultExecutor;
use libcontainer::workload::{
    Executor, ExecutorError, ExecutorSetEnvsError, ExecutorValidationError,
};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};

use crate::cgroup_dirs::CgroupDirs;
use crate::exec_userns::{self, JoinUserns};
use crate::own_oom_score::SavedOomScore;

/// The default executor, after restoring the signal state a fresh process
/// would have, and (for exec processes) loading the container's seccomp
/// filter; env values that are not UTF-8 are set from the bundle's
/// `raw-env` ([`berth_shim_api::raw_env`]).
#[derive(Clone, Default)]
pub struct CleanExecutor {
    seccomp: Option<LinuxSeccomp>,
    raw_env: Vec<(OsString, OsString)>,
    /// For exec processes of a container in a user namespace: joining it.
    userns: Option<JoinUserns>,
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

/// Where the init's stdio goes.
pub enum InitStdio {
    /// stdin, stdout, stderr (their numbers must be above 2: libcontainer
    /// `dup2`s each onto 0/1/2 and then closes the original).
    Pipes {
        stdin: OwnedFd,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
    /// A pty: libcontainer connects to this socket while creating and the
    /// init sends the pty master over it.
    Console(PathBuf),
}

/// Identifies a container to libcontainer.
#[derive(Debug, Clone)]
pub struct ContainerRef {
    pub id: String,
    pub state_root: PathBuf,
}

impl ContainerRef {
    fn builder(&self, executor: CleanExecutor) -> Result<ContainerBuilder, LibcontainerError> {
        ContainerBuilder::new(self.id.clone(), SyscallType::Linux)
            .with_root_path(&self.state_root)
            .map(|b| b.with_executor(executor))
    }

    /// Creates the container: the init is set up and waits for `start`.
    /// `systemd_cgroup`: the spec's cgroupsPath is systemd's
    /// `slice:prefix:name` ([`is_systemd_cgroups_path`]), so libcontainer
    /// makes the container a transient scope over D-Bus.
    pub fn create(
        &self,
        bundle: &Path,
        stdio: InitStdio,
        systemd_cgroup: bool,
        raw_env: &[(OsString, OsString)],
    ) -> Result<Container, LibcontainerError> {
        let executor = CleanExecutor {
            seccomp: None,
            raw_env: raw_env.to_vec(),
            userns: None,
        };
        let builder = self.builder(executor)?.validate_id()?;
        let builder = match stdio {
            InitStdio::Pipes {
                stdin,
                stdout,
                stderr,
            } => builder
                .with_stdin(stdin)
                .with_stdout(stdout)
                .with_stderr(stderr),
            InitStdio::Console(socket) => builder.with_console_socket(Some(socket)),
        };
        let own_score = SavedOomScore::save();
        let container = builder
            .as_init(bundle)
            .with_systemd(systemd_cgroup)
            .with_detach(true)
            .build();
        own_score.restore();
        container
    }

    /// Starts a process in the running container; returns its pid once it
    /// has exec'd. A process with a terminal sends its pty master to
    /// `console` (a listening socket) and uses the pty for its stdio.
    pub fn exec(
        &self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<i32, LibcontainerError> {
        let result = self.build_tenant(process, stdio, console);
        let _ = std::fs::remove_file(&process.json_path);
        self.remove_tenant_sockets();
        result
    }

    fn build_tenant(
        &self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<i32, LibcontainerError> {
        // In a user namespace the process is set up as host root and joins
        // it itself (see exec_userns); the namespace's file stays open
        // until libcontainer has forked the process.
        let prepared = match &process.user_namespace {
            Some(userns) => Some(
                exec_userns::prepare(&process.process, userns)
                    .map_err(LibcontainerError::OtherIO)?,
            ),
            None => None,
        };
        let spec_process = prepared
            .as_ref()
            .map_or(&process.process, |prepared| &prepared.process);
        let json =
            serde_json::to_vec(spec_process).map_err(LibcontainerError::OtherSerialization)?;
        // The exec's whole env (Secrets included): root's alone.
        write_private(&process.json_path, &json).map_err(LibcontainerError::OtherIO)?;
        let [stdin, stdout, stderr] = stdio;
        let executor = CleanExecutor {
            seccomp: process.seccomp.clone(),
            raw_env: process.raw_env.clone(),
            userns: prepared.as_ref().map(|prepared| prepared.join.clone()),
        };
        let own_score = SavedOomScore::save();
        let pid = self
            .builder(executor)?
            .with_stdin(stdin)
            .with_stdout(stdout)
            .with_stderr(stderr)
            .with_console_socket(console)
            .as_tenant()
            .with_process(Some(&process.json_path))
            .with_detach(true)
            .build();
        own_score.restore();
        drop(prepared);
        Ok(pid?.as_raw())
    }
}

impl ContainerRef {
    /// libcontainer leaves one `tenant-notify-*.sock` per exec (and a
    /// `tenant-tty-*` link per tty exec) in the container's state
    /// directory; with kubelet probing through ExecSync they would pile up.
    /// Once `build()` has returned they are unused.
    fn remove_tenant_sockets(&self) {
        let dir = self.state_root.join(&self.id);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("tenant-notify-") || name.starts_with("tenant-tty-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// An exec'd process, fully resolved.
///
/// It goes to libcontainer as a `process.json` (`with_process`, what
/// `runc exec --process` takes) rather than through the tenant builder's
/// setters: those start from oci-spec's `Process::default()`, which sets
/// no_new_privs, and give no capabilities when the spec lists none; a full
/// process keeps the container's settings.
#[derive(Debug, Clone)]
pub struct ExecProcess {
    pub process: Process,
    /// The container's seccomp profile, applied to the process too.
    pub seccomp: Option<LinuxSeccomp>,
    /// The container's env values that are not UTF-8, inherited too.
    pub raw_env: Vec<(OsString, OsString)>,
    /// The user namespace the container joined, which the process joins.
    pub user_namespace: Option<exec_userns::ContainerUserns>,
    /// Where the process.json is written for the duration of the call.
    pub json_path: PathBuf,
}

/// Sends `signal` (1..=31, what libcontainer accepts) to every process in
/// the container's cgroup: through the cgroup dirs berthd named where it
/// named them, else through libcontainer.
pub fn kill_all(
    container: &mut Container,
    dirs: Option<&CgroupDirs>,
    signal: i32,
) -> Result<(), LibcontainerError> {
    match dirs {
        Some(dirs) => {
            let sig = Signal::try_from(signal)
                .map_err(|e| LibcontainerError::Other(format!("signal {signal}: {e}")))?;
            dirs.signal_all(sig).map_err(LibcontainerError::OtherIO)
        }
        None => {
            let sig = libcontainer::signal::Signal::try_from(signal)
                .map_err(|e| LibcontainerError::Other(e.to_string()))?;
            container.kill(sig, true)
        }
    }
}

/// Deletes the container, which must be stopped: its cgroup and its
/// libcontainer state. With cgroup dirs and no poststop hooks that is
/// all libcontainer's delete would do (it has no Intel RDT to clean up
/// either); anything else, or a container that is not stopped, goes
/// through libcontainer.
pub fn delete(
    container: &mut Container,
    dirs: Option<&CgroupDirs>,
    poststop_hooks: bool,
) -> Result<(), LibcontainerError> {
    let Some(dirs) = dirs.filter(|_| !poststop_hooks) else {
        return container.delete(true);
    };
    container.refresh_status()?;
    if container.status() != ContainerStatus::Stopped {
        return container.delete(true);
    }
    dirs.remove().map_err(LibcontainerError::OtherIO)?;
    match std::fs::remove_dir_all(&container.root) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LibcontainerError::OtherIO(e)),
    }
}

/// Writes `bytes` to a new file at `path`, mode 0600 from its creation on.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// `slice:prefix:name` (systemd) as opposed to an absolute path (cgroupfs).
pub fn is_systemd_cgroups_path(path: &Path) -> bool {
    let text = path.to_string_lossy();
    !text.starts_with('/') && text.split(':').count() == 3
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

#[cfg(test)]
mod cgroups_path_tests {
    use super::*;

    #[test]
    fn systemd_paths_are_triples() {
        assert!(is_systemd_cgroups_path(Path::new("system.slice:berth:c1")));
        assert!(is_systemd_cgroups_path(Path::new(":berth:c1")));
        assert!(!is_systemd_cgroups_path(Path::new("/berth/c1")));
        assert!(!is_systemd_cgroups_path(Path::new("/a:b:c")));
    }
}

#[cfg(test)]
#[path = "runtime_seccomp_tests.rs"]
mod seccomp_tests;
