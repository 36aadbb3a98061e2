//! What can go wrong with a container, naming the container, field or file
//! involved. `server/errors.rs` turns each kind into its gRPC code; nothing
//! here knows about gRPC.

use std::io;
use std::path::PathBuf;

use berth_cgroups::{CgroupError, NamingError};

use crate::sandbox::SandboxError;
use crate::state_store::{AmbiguousId, StateError};

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("container {id:?} not found")]
    NotFound { id: String },
    #[error(transparent)]
    AmbiguousId(#[from] AmbiguousId),
    /// The pod sandbox could not be looked up (or is gone).
    #[error(transparent)]
    Sandbox(Box<SandboxError>),
    #[error("image {image:?} not found: pull it first")]
    ImageNotFound { image: String },
    #[error("mount {container_path:?}: image volume {image:?} not found: pull it first")]
    ImageVolumeNotFound {
        container_path: String,
        image: String,
    },
    #[error("mount {container_path:?}: image_sub_path {sub_path:?} of image {image:?}: {source}")]
    ImageSubPath {
        container_path: String,
        image: String,
        sub_path: String,
        source: super::image_volumes::SubPathError,
    },
    #[error(transparent)]
    Cdi(#[from] berth_spec::cdi::CdiError),
    #[error("container name {name:?} is reserved by container {holder}")]
    NameReserved { name: String, holder: String },

    // PID namespace TARGET: three distinct failures, each naming the id.
    #[error("namespace_options.target_id: container {target_id:?} not found")]
    TargetNotFound { target_id: String },
    #[error("namespace_options.target_id: container {target_id} is in another pod sandbox")]
    TargetInOtherSandbox { target_id: String },
    #[error("namespace_options.target_id: container {target_id} is not running")]
    TargetNotRunning { target_id: String },

    #[error("image file {path} is {size} bytes; berth reads at most {cap}")]
    ImageFileTooLarge { path: String, size: u64, cap: u64 },
    /// The request's config cannot become an OCI spec (or a log path).
    #[error(transparent)]
    Spec(#[from] berth_spec::SpecError),
    #[error("cgroup: {0}")]
    CgroupName(#[source] Box<NamingError>),
    /// The directory of the container's log (from the sandbox config's
    /// `log_directory` and the config's `log_path`) cannot be made.
    #[error("log directory {path:?}: {source}")]
    LogDir { path: PathBuf, source: io::Error },

    /// The shim could not create the container; the message carries the
    /// shim's reason and where its log is kept.
    #[error("{message}")]
    CreateFailed { id: String, message: String },
    /// The shim did not create the container in time and was killed.
    #[error("{message}")]
    CreateTimedOut { id: String, message: String },
    /// The shim refused or failed to start the container (same form).
    #[error("{message}")]
    StartFailed { id: String, message: String },
    #[error("exec in container {id}: {message}")]
    ExecRefused { id: String, message: String },
    #[error("container {id} is not running")]
    NotRunning { id: String },
    /// CRIU is missing or cannot run on this node (`criu check` failed).
    #[error("cannot checkpoint container {id}: CRIU cannot run on this node: {reason}")]
    CheckpointUnavailable {
        id: String,
        reason: super::host::CriuUnusable,
    },
    /// The request's image is a checkpoint image and the config does not
    /// allow restores from images.
    #[error(
        "image {image} is a checkpoint of container {container}; restoring from checkpoint images is off on this node (allow_checkpoint_images in berthd's config)"
    )]
    CheckpointImageRefused { image: String, container: String },
    /// The request's image is a checkpoint archive that cannot be used.
    #[error("checkpoint archive: {0}")]
    CheckpointArchive(#[from] super::checkpoint_archive::ArchiveError),
    /// The archive cannot be written where the request said.
    #[error("checkpointing container {id}: writing the archive {location:?}: {source}")]
    CheckpointLocation {
        id: String,
        location: PathBuf,
        source: io::Error,
    },
    #[error("checkpointing container {id}: CRIU did not finish within {after:?}")]
    CheckpointTimedOut {
        id: String,
        after: std::time::Duration,
    },
    /// CRIU's dump failed; the message ends with CRIU's own error lines.
    #[error("checkpointing container {id}: {message}")]
    CheckpointFailed { id: String, message: String },
    /// The spec's device rules cannot be enforced by a device cgroup.
    #[error("container {id}: {source}")]
    DeviceRules {
        id: String,
        source: berth_cgroups::devices::DeviceRuleError,
    },
    /// The container's cgroup could not be given its device policy: the
    /// container must not run without it.
    #[error("container {id}: cannot restrict its devices: {source}")]
    DeviceFilter {
        id: String,
        source: Box<CgroupError>,
    },
    #[error("updating container {id}: {source}")]
    UpdateRefused {
        id: String,
        source: Box<CgroupError>,
    },

    /// The container's pod (or the container itself) names a runtime
    /// handler the config no longer has: its runtime and state root are
    /// unknown, and it is never taken for the default one.
    #[error(
        "{what}: runtime handler {handler:?} is not configured (runtime_handlers in the config); configure it again to {action}"
    )]
    UnknownRuntimeHandler {
        /// The pod or container, named.
        what: String,
        handler: String,
        action: &'static str,
    },

    /// A checkpoint archive as the image of a container in a pod whose
    /// handler runs a runtime binary: the shim restores through
    /// libcontainer only.
    #[error(
        "image: restoring a checkpoint is not supported under runtime handler {handler:?} ({runtime}); only the default handler restores checkpoints"
    )]
    RestoreUnsupported { handler: String, runtime: PathBuf },

    #[error("container {id} did not stop after SIGKILL")]
    DidNotStop { id: String },
    #[error("shim of container {id}: {source}")]
    ShimUnreachable { id: String, source: io::Error },
    #[error("shim of container {id} answered {answer}")]
    ShimAnswer { id: String, answer: String },
    #[error("cannot start the shim {binary}: {source}")]
    ShimSpawn { binary: PathBuf, source: io::Error },
    #[error("image config {image} is unreadable: {source}")]
    ImageConfig {
        image: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    ImageStore(#[from] berth_image::store::StoreError),
    #[error(transparent)]
    Rootfs(#[from] super::rootfs::RootfsError),
    /// A bind mount of a container in a pod with its own user namespace
    /// could not be idmapped through it: never bound unmapped instead.
    #[error(
        "mount {container_path:?} (host path {host_path:?}) cannot be idmapped into the pod's user namespace: {source}{}",
        .source.hint()
    )]
    IdmappedMount {
        container_path: String,
        host_path: String,
        source: super::idmap::IdmapError,
    },
    #[error("cgroup: {0}")]
    Cgroup(#[source] Box<CgroupError>),
    #[error("writing config.json: {0}")]
    WriteSpec(#[source] oci_spec::OciSpecError),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Intent(#[from] crate::recovery::intent::IntentError),
    #[error(transparent)]
    Journal(#[from] super::journal::JournalError),
    #[error("{what}: {source}")]
    Task {
        what: &'static str,
        source: tokio::task::JoinError,
    },
}

impl From<SandboxError> for ContainerError {
    fn from(err: SandboxError) -> Self {
        ContainerError::Sandbox(Box::new(err))
    }
}

impl ContainerError {
    /// An I/O failure, saying what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        ContainerError::Io {
            what: what.into(),
            source,
        }
    }
}
