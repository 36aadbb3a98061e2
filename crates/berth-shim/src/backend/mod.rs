//! What the shim asks of an OCI runtime, behind one trait.
//!
//! The shim drives a runtime the way conmon does: one container, named by
//! its id, made from a bundle, its state kept under a state root. It asks
//! the runtime to create the container (stdio pipes, or a console socket
//! the pty master comes back over), start it, report its state, signal it,
//! delete it, run a process in it, and dump or restore it with CRIU. All
//! the rest stays the shim's own, whatever the runtime: it is the parent
//! and subreaper of every container process, reaps them, writes the CRI
//! log and the exit file, serves attachers and berthd's socket.
//!
//! The bundle's `config.json` is a standard OCI spec (berth-spec writes
//! nothing else). A runtime with a dialect of its own adapts the spec in
//! its backend: [`libcontainer::LibcontainerBackend`], the default, runs
//! youki's libcontainer in the shim's process and carries every quirk of
//! it; [`oci_cli::OciCliBackend`] runs any OCI runtime's binary (runc,
//! crun, youki, runsc) with `--runtime-binary`. Tests use a runtime that runs nothing (`fake`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use ::libcontainer::oci_spec::runtime::Process;

#[cfg(test)]
pub mod fake;
pub mod libcontainer;
mod libcontainer_executor;
mod libcontainer_spec;
pub mod oci_cli;

/// Identifies a container to its runtime: conmon's id and state root.
#[derive(Debug, Clone)]
pub struct ContainerRef {
    pub id: String,
    /// The runtime's state root; the container's state is `<root>/<id>`.
    pub state_root: PathBuf,
}

/// Where the init's stdio goes.
pub enum InitStdio {
    /// stdin, stdout, stderr (their numbers must be above 2: a runtime
    /// `dup2`s each onto 0/1/2 and then closes the original).
    Pipes {
        stdin: OwnedFd,
        stdout: OwnedFd,
        stderr: OwnedFd,
    },
    /// A pty: the runtime connects to this socket while creating and sends
    /// the pty master over it.
    Console(PathBuf),
}

/// A process to run in the container, fully resolved: what `runc exec
/// --process` takes.
#[derive(Debug, Clone)]
pub struct ExecProcess {
    pub process: Process,
    /// Where the process.json is written for the duration of the call.
    pub json_path: PathBuf,
}

/// What the runtime says of the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeStatus {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
}

/// A failed runtime call; its message (and sources) say what the runtime
/// said.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Libcontainer(#[from] ::libcontainer::error::LibcontainerError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Message(String),
}

impl BackendError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// The runtime calls the shim makes. One backend drives one container;
/// the shim is single-threaded, so none of these runs beside another.
pub trait RuntimeBackend {
    /// Creates the container from `bundle`: its init is set up and waits
    /// for [`start`](Self::start). Returns the init's pid; the init is the
    /// shim's child.
    fn create(&mut self, bundle: &Path, stdio: InitStdio) -> Result<i32, BackendError>;

    /// Lets the created init run the container's process.
    fn start(&mut self) -> Result<(), BackendError>;

    /// The runtime's view of the container.
    fn state(&mut self) -> Result<RuntimeStatus, BackendError>;

    /// Sends `signal` (any number, real-time ones included) to the init,
    /// or with `all` to every process of the container.
    fn kill(&mut self, signal: i32, all: bool) -> Result<(), BackendError>;

    /// Removes the container: its cgroup and the runtime's state. `force`
    /// kills what still runs first.
    fn delete(&mut self, force: bool) -> Result<(), BackendError>;

    /// Starts `process` in the running container; returns its pid once it
    /// has exec'd. The process is the shim's child. With `console` (a
    /// listening socket) it gets a pty and sends the master there.
    fn exec(
        &mut self,
        process: &ExecProcess,
        stdio: [OwnedFd; 3],
        console: Option<&Path>,
    ) -> Result<i32, BackendError>;

    /// The pid [`create`](Self::create) returned is not the container's
    /// own process but one it shares (a runsc subcontainer's is its pod's
    /// gVisor sandbox): it is not moved into the container's cgroups, and
    /// after [`start`](Self::start) [`init_waiter`](Self::init_waiter) is
    /// reaped in its place.
    fn shares_init(&self) -> bool {
        false
    }

    /// The shim's child that exits when the container's init does, when
    /// that is not the init itself ([`shares_init`](Self::shares_init)).
    fn init_waiter(&self) -> Option<i32> {
        None
    }

    /// The init's exit code, from what the shim reaped (`code`): the
    /// waiter's report where there is one.
    fn init_exit_code(&mut self, code: i32) -> i32 {
        code
    }

    /// Kills the process an [`exec`](Self::exec) that returned `pid`
    /// started, where that is not `pid` itself: the shim kills `pid` (and
    /// its group), which is the process for runtimes that exec it in the
    /// container, but runsc's is its host-side `runsc exec`, whose death
    /// leaves the process in the gVisor sandbox running.
    fn kill_exec(&mut self, _pid: i32) {}

    /// The shim reaped `pid`: whatever [`kill_exec`](Self::kill_exec)
    /// kept for it goes.
    fn forget_exec(&mut self, _pid: i32) {}

    /// Dumps the container's processes with CRIU into `images_dir`,
    /// leaving them running; CRIU's logs go to `work_dir`.
    fn checkpoint(&mut self, images_dir: &Path, work_dir: &Path) -> Result<(), BackendError>;

    /// Restores a dump into the created container in place of its
    /// placeholder init (which the caller then kills); returns the
    /// restored init's pid.
    fn restore(&mut self, input: &crate::checkpoint::RestoreInput<'_>)
        -> Result<i32, BackendError>;
}
