//! The default backend: youki's libcontainer, in the shim's own process
//! (no runtime binary to exec: berth's speed).
//!
//! Everything that exists only because of libcontainer is here:
//! - its `SCMP_CMP_MASKED_EQ` operand order ([`super::libcontainer_spec`]);
//! - its executor ([`CleanExecutor`]): signal state, raw env values, and
//!   the seccomp profile and user namespace its exec leaves out;
//! - the init is cloned with `CLONE_PARENT` by libcontainer's intermediate
//!   process, so it is the shim's direct child; so is every exec process;
//! - `build()` consumes the stdio fds it is given and closes its copies
//!   when it returns, so the shim keeps only its own ends;
//! - `build()` sets the process's oom_score_adj on the shim itself; it is
//!   put back ([`crate::own_oom_score`]);
//! - the tenant (exec) builder leaves a notify socket file behind per
//!   exec, removed after each;
//! - its state dir is made 0755 and holds the spec with the hooks' env:
//!   narrowed after the create;
//! - its kill-all and delete build a cgroup manager that reads the whole
//!   mount table per v1 controller: with the cgroup dirs berthd named the
//!   backend signals and removes the cgroup itself ([`CgroupDirs`]);
//! - on cgroup v1 it cannot be given a `cgroup` mount: its
//!   `Mount::mount_cgroup_v1` reads the cgroups of `/proc/<parent_id()>`
//!   in the host's procfs, and when `parent_id()` is 0 (always, for an init
//!   that joined an existing PID namespace: PID `TARGET`, a pod's shared
//!   one) of `/proc/<its own pid in that namespace>`, another host process
//!   or none (`procfs failed: NotFound`). berth-spec lays the v1 view out
//!   as tmpfs and bind mounts instead (`berth_spec::cgroup_mounts`).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;

use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::{Container, ContainerStatus};
use libcontainer::error::LibcontainerError;
use libcontainer::oci_spec::runtime::LinuxSeccomp;
use libcontainer::syscall::syscall::SyscallType;
use nix::errno::Errno;
use nix::sys::signal::Signal;

use super::libcontainer_executor::CleanExecutor;
use super::libcontainer_spec::{adapted_bundle, libcontainer_seccomp};
use super::{BackendError, ContainerRef, ExecProcess, InitStdio, RuntimeBackend, RuntimeStatus};
use crate::bundle::BundleInfo;
use crate::cgroup_dirs::CgroupDirs;
use crate::exec_userns::{self, ContainerUserns};
use crate::own_oom_score::SavedOomScore;

/// libcontainer driving one container.
pub struct LibcontainerBackend {
    target: ContainerRef,
    container: Option<Container>,
    /// The spec's cgroupsPath is systemd's `slice:prefix:name`
    /// ([`is_systemd_cgroups_path`]): libcontainer makes the container a
    /// transient scope over D-Bus.
    systemd_cgroup: bool,
    raw_env: Vec<(OsString, OsString)>,
    /// The container's filter, in libcontainer's order, for exec'd
    /// processes (its exec does not load it).
    exec_seccomp: Option<LinuxSeccomp>,
    user_namespace: Option<ContainerUserns>,
    userns_root_gid: Option<u32>,
    /// Deleting then goes through libcontainer, which runs them.
    poststop_hooks: bool,
    /// The cgroup dirs berthd named (cgroupfs paths only).
    cgroup_dirs: Option<CgroupDirs>,
}

impl LibcontainerBackend {
    pub fn new(target: ContainerRef, bundle: &BundleInfo, cgroup_dirs: Option<CgroupDirs>) -> Self {
        let systemd_cgroup = bundle
            .cgroups_path
            .as_deref()
            .is_some_and(is_systemd_cgroups_path);
        let exec_seccomp = bundle
            .seccomp
            .as_ref()
            .map(|s| libcontainer_seccomp(s).unwrap_or_else(|| s.clone()));
        Self {
            target,
            container: None,
            systemd_cgroup,
            raw_env: bundle.raw_env.clone(),
            exec_seccomp,
            user_namespace: bundle.user_namespace.clone(),
            userns_root_gid: bundle.userns_root_gid,
            poststop_hooks: bundle.poststop_hooks,
            // A systemd scope is systemd's to remove.
            cgroup_dirs: cgroup_dirs.filter(|_| !systemd_cgroup),
        }
    }

    fn builder(&self, executor: CleanExecutor) -> Result<ContainerBuilder, LibcontainerError> {
        ContainerBuilder::new(self.target.id.clone(), SyscallType::Linux)
            .with_root_path(&self.target.state_root)
            .map(|b| b.with_executor(executor))
    }

    fn container(&mut self) -> Result<&mut Container, BackendError> {
        self.container
            .as_mut()
            .ok_or_else(|| BackendError::Message("the container was not created".into()))
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
        let prepared = match &self.user_namespace {
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
            seccomp: self.exec_seccomp.clone(),
            raw_env: self.raw_env.clone(),
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

    /// libcontainer leaves one `tenant-notify-*.sock` per exec (and a
    /// `tenant-tty-*` link per tty exec) in the container's state
    /// directory; with kubelet probing through ExecSync they would pile up.
    /// Once `build()` has returned they are unused.
    fn remove_tenant_sockets(&self) {
        let dir = self.target.state_root.join(&self.target.id);
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

impl RuntimeBackend for LibcontainerBackend {
    fn create(&mut self, bundle: &Path, stdio: InitStdio) -> Result<i32, BackendError> {
        let bundle = adapted_bundle(bundle)?;
        let executor = CleanExecutor {
            seccomp: None,
            raw_env: self.raw_env.clone(),
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
        let built = builder
            .as_init(&bundle)
            .with_systemd(self.systemd_cgroup)
            .with_detach(true)
            .build();
        own_score.restore();
        let mut container = built?;
        let checked = container
            .pid()
            .map(|pid| pid.as_raw())
            .ok_or_else(|| BackendError::Message("container created but its pid is unknown".into()))
            .and_then(|pid| restrict_state_dir(&container, self.userns_root_gid).map(|()| pid));
        match checked {
            Ok(pid) => {
                self.container = Some(container);
                Ok(pid)
            }
            Err(err) => {
                // do not leave a created container nobody will ever start
                if let Err(e) = container.delete(true) {
                    tracing::error!(%e, "removing the half-made container");
                }
                Err(err)
            }
        }
    }

    fn start(&mut self) -> Result<(), BackendError> {
        Ok(self.container()?.start()?)
    }

    fn state(&mut self) -> Result<RuntimeStatus, BackendError> {
        let container = self.container()?;
        container.refresh_status()?;
        Ok(match container.status() {
            ContainerStatus::Creating => RuntimeStatus::Creating,
            ContainerStatus::Created => RuntimeStatus::Created,
            ContainerStatus::Running => RuntimeStatus::Running,
            ContainerStatus::Paused => RuntimeStatus::Paused,
            ContainerStatus::Stopped => RuntimeStatus::Stopped,
        })
    }

    fn kill(&mut self, signal: i32, all: bool) -> Result<(), BackendError> {
        if !all {
            // The init is the shim's child and not reaped yet (the shim
            // checks), so its pid cannot have been reused.
            let pid = self
                .container()?
                .pid()
                .ok_or_else(|| BackendError::Message("the container's init has no pid".into()))?;
            // SAFETY: kill(2) takes plain integers and touches no memory.
            let rc = unsafe { nix::libc::kill(pid.as_raw(), signal) };
            return match Errno::result(rc) {
                Ok(_) | Err(Errno::ESRCH) => Ok(()),
                Err(e) => Err(BackendError::io("kill", e.into())),
            };
        }
        match &self.cgroup_dirs {
            Some(dirs) => {
                let sig = Signal::try_from(signal)
                    .map_err(|e| BackendError::Message(format!("signal {signal}: {e}")))?;
                dirs.signal_all(sig)
                    .map_err(|e| BackendError::io("signalling the cgroup", e))
            }
            None => {
                let sig = libcontainer::signal::Signal::try_from(signal)
                    .map_err(|e| BackendError::Message(e.to_string()))?;
                Ok(self.container()?.kill(sig, true)?)
            }
        }
    }

    /// With cgroup dirs and no poststop hooks, a stopped container's
    /// cgroup and libcontainer state are all libcontainer's delete would
    /// remove (it has no Intel RDT to clean up either); anything else, or
    /// a container that is not stopped, goes through libcontainer.
    fn delete(&mut self, force: bool) -> Result<(), BackendError> {
        let dirs = self.cgroup_dirs.clone().filter(|_| !self.poststop_hooks);
        let container = self.container()?;
        let Some(dirs) = dirs else {
            return Ok(container.delete(force)?);
        };
        container.refresh_status()?;
        if container.status() != ContainerStatus::Stopped {
            return Ok(container.delete(force)?);
        }
        dirs.remove()
            .map_err(|e| BackendError::io("removing the cgroup", e))?;
        match std::fs::remove_dir_all(&container.root) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(BackendError::io("removing the container's state", e)),
        }
    }

    fn exec(
        &mut self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<i32, BackendError> {
        let result = self.build_tenant(process, stdio, console);
        let _ = std::fs::remove_file(&process.json_path);
        self.remove_tenant_sockets();
        Ok(result?)
    }

    fn checkpoint(&mut self, images_dir: &Path, work_dir: &Path) -> Result<(), BackendError> {
        crate::checkpoint::dump(self.container()?, images_dir, work_dir)
            .map_err(BackendError::Message)
    }

    fn restore(
        &mut self,
        input: &crate::checkpoint::RestoreInput<'_>,
    ) -> Result<i32, BackendError> {
        let pid = crate::checkpoint::restore(input).map_err(BackendError::Message)?;
        // libcontainer's exec and kill find the container by this state.
        let saved = self
            .container()?
            .set_pid(pid)
            .set_status(ContainerStatus::Running)
            .save();
        if let Err(err) = saved {
            tracing::warn!(error = %crate::server::error_chain(&err), "saving the restored container's state");
        }
        Ok(pid)
    }
}

/// libcontainer's state dir of the container (its spec and state, with
/// the hooks' env) becomes root's alone, or searchable by the group the
/// container's root maps to in a user namespace, whose init reaches its
/// notify socket there. libcontainer makes it 0755.
fn restrict_state_dir(container: &Container, userns_gid: Option<u32>) -> Result<(), BackendError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = &container.root;
    let mode = match userns_gid {
        Some(gid) => {
            std::os::unix::fs::chown(dir, None, Some(gid))
                .map_err(|e| BackendError::io("opening the state dir to the user namespace", e))?;
            0o710
        }
        None => 0o700,
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| BackendError::io("restricting the container's state dir", e))
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
