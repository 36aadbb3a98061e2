//! What can go wrong with a pod sandbox, naming the sandbox, field, path or
//! network involved. `server/errors.rs` turns each kind into its gRPC code;
//! nothing here knows about gRPC.

use std::io;
use std::path::PathBuf;

use berth_cgroups::{CgroupError, NamingError};
use berth_network::cni::CniError;

use crate::state_store::{AmbiguousId, StateError};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("pod sandbox {id:?} not found")]
    NotFound { id: String },
    #[error(transparent)]
    AmbiguousId(#[from] AmbiguousId),
    #[error("pod sandbox name {name:?} is reserved by sandbox {holder}")]
    NameReserved { name: String, holder: String },
    #[error("runtime_handler {handler:?} is not configured (runtime_handlers in the config)")]
    UnknownRuntimeHandler { handler: String },

    #[error("linux.cgroup_parent: {0}")]
    CgroupParentName(#[source] Box<NamingError>),
    #[error("cgroup parent {parent}: {source}")]
    CgroupParent {
        parent: String,
        source: Box<CgroupError>,
    },
    #[error("updating the resources of pod sandbox {id} in cgroup {parent}: {source}")]
    ResourcesRefused {
        id: String,
        parent: String,
        source: Box<CgroupError>,
    },
    #[error("sandbox cgroup {path}: {source}")]
    Cgroup {
        path: String,
        source: Box<CgroupError>,
    },

    #[error(
        "linux.sysctls: {key:?} is not a namespaced sysctl, so it would change the whole node"
    )]
    SysctlNotNamespaced { key: String },
    #[error(
        "linux.sysctls: {key:?} needs the pod's own {namespace} namespace, but the pod uses the host's"
    )]
    SysctlOfHostNamespace {
        key: String,
        namespace: &'static str,
    },
    /// A sysctl berth-pinns found malformed or the kernel refused.
    #[error("linux.sysctls: {stderr}")]
    SysctlRefused { stderr: String },
    #[error(transparent)]
    UserNamespace(#[from] berth_spec::userns::UsernsError),
    /// An AppArmor profile or SELinux label the pod asks for that berth
    /// cannot give it here (see `berth_spec::lsm`).
    #[error("linux.security_context: {0}")]
    SecurityModule(#[source] berth_spec::SpecError),
    #[error("namespace_options.userns_options mode POD: this host cannot run pods in a user namespace (it needs user namespaces and Linux 5.19 or later for idmapped overlay mounts)")]
    UserNamespacesUnsupported,
    #[error("cannot run {binary}: {source}")]
    PinnsSpawn { binary: PathBuf, source: io::Error },
    #[error("creating pod namespaces failed: {stderr}")]
    PinFailed { stderr: String },
    #[error("network namespace was not pinned")]
    NetnsNotPinned,
    #[error("mount shm at {path}: {source}")]
    ShmMount { path: PathBuf, source: nix::Error },
    #[error("infra process {pid} vanished at start")]
    InfraVanished { pid: i32 },
    #[error("infra process into {path}: {source}")]
    InfraCgroup {
        path: String,
        source: Box<CgroupError>,
    },

    #[error("network not ready: {0}")]
    NetworkNotReady(String),
    #[error("CNI ADD on network {network:?}: {source}")]
    CniAdd {
        network: String,
        source: Box<CniError>,
    },
    #[error("CNI DEL for sandbox {id}: {source}")]
    CniDel { id: String, source: Box<CniError> },
    #[error("saved CNI config of {id}: {source}")]
    SavedCniConfig { id: String, source: Box<CniError> },

    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Intent(#[from] crate::recovery::intent::IntentError),
    #[error(transparent)]
    Journal(#[from] super::journal::JournalError),
    #[error("the journal in {dir} names another sandbox, {id:?}")]
    ForeignJournal { dir: PathBuf, id: String },
    #[error("unmount {path}: {source}")]
    Unmount { path: PathBuf, source: io::Error },
}

impl SandboxError {
    /// An I/O failure, saying what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        SandboxError::Io {
            what: what.into(),
            source,
        }
    }
}
