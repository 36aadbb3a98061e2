//! What a pod checkpoint or restore can fail on; `server/errors.rs` gives
//! each its gRPC code.

use crate::container::host::CriuUnusable;
use crate::container::ContainerError;
use crate::sandbox::SandboxError;

use super::manifest::NotACheckpoint;

#[derive(Debug, thiserror::Error)]
pub enum PodCheckpointError {
    /// A field of the request is wrong: InvalidArgument naming it.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("pod sandbox {id:?} not found")]
    PodNotFound { id: String },
    #[error("pod sandbox {id} is not ready: only a running pod is checkpointed")]
    PodNotReady { id: String },
    #[error("container {container} is not in pod sandbox {pod} (it is in {owner})")]
    NotInPod {
        container: String,
        pod: String,
        owner: String,
    },
    #[error("container {id} ({name}) is not running: only running containers are checkpointed")]
    ContainerNotRunning { id: String, name: String },
    /// CRIU is missing or cannot run here.
    #[error("cannot {what} pod {pod}: CRIU cannot run on this node: {reason}")]
    CriuUnavailable {
        what: &'static str,
        pod: String,
        reason: CriuUnusable,
    },
    #[error(transparent)]
    NotACheckpoint(#[from] NotACheckpoint),
    /// The container's own checkpoint or create failed; `context` names
    /// the container where its own error does not.
    #[error("{context}: {source}")]
    Container {
        context: String,
        #[source]
        source: Box<ContainerError>,
    },
    #[error(transparent)]
    Sandbox(Box<SandboxError>),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<SandboxError> for PodCheckpointError {
    fn from(err: SandboxError) -> Self {
        Self::Sandbox(Box::new(err))
    }
}

impl PodCheckpointError {
    pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
