//! What stands behind the streaming server: exec sessions and attach
//! through the container's shim, port-forward dials inside the pod's
//! network namespace.

mod attach;
mod exec;
mod fdio;
mod netns;

use std::sync::Arc;

use berth_shim_api::files::ShimFiles;
use berth_shim_api::protocol::RunState;
use berth_stream::{AttachSpec, ExecSpec, SessionError, SessionStreams, StreamRuntime};
use cri_api::v1::NamespaceMode;
use tokio::net::TcpStream;

use crate::container::store::ContainerRecord;
use crate::container::ContainerManager;
use crate::sandbox::SandboxManager;

/// [`StreamRuntime`] over berth's containers and sandboxes.
pub struct ContainerStreams {
    containers: Arc<ContainerManager>,
    sandboxes: Arc<SandboxManager>,
}

impl ContainerStreams {
    pub fn new(containers: Arc<ContainerManager>, sandboxes: Arc<SandboxManager>) -> Self {
        Self {
            containers,
            sandboxes,
        }
    }

    /// The container's record, if it exists and runs.
    async fn running(&self, id: &str) -> Result<ContainerRecord, SessionError> {
        let handle = self
            .containers
            .find(id)
            .map_err(|err| SessionError::Failed(err.to_string()))?
            .ok_or_else(|| SessionError::ContainerNotFound(id.to_string()))?;
        let record = handle.lock().await.clone();
        match self.containers.state(&record).await {
            Some(state) if state.status == RunState::Running => Ok(record),
            _ => Err(SessionError::NotRunning(record.id)),
        }
    }
}

impl StreamRuntime for ContainerStreams {
    async fn exec(&self, spec: ExecSpec, streams: SessionStreams) -> Result<i32, SessionError> {
        let record = self.running(&spec.container_id).await?;
        let socket = ShimFiles::new(record.shim_dir.clone()).socket();
        exec::run(&record.id, socket, &spec, streams).await
    }

    async fn attach(&self, spec: AttachSpec, streams: SessionStreams) -> Result<(), SessionError> {
        let record = self.running(&spec.container_id).await?;
        let config = record.config.clone();
        let mut spec = spec;
        if spec.stdin && !config.stdin {
            // as containerd: the client's stdin goes nowhere, output flows
            tracing::debug!(container = %record.id, "attach: the container has no stdin");
            spec.stdin = false;
        }
        let socket = ShimFiles::new(record.shim_dir.clone()).attach_socket();
        attach::run(&record.id, socket, &spec, config.stdin_once, streams).await
    }

    async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
    ) -> Result<TcpStream, SessionError> {
        let handle = self
            .sandboxes
            .find(pod_sandbox_id)
            .map_err(|err| SessionError::Failed(err.to_string()))?
            .ok_or_else(|| SessionError::SandboxNotFound(pod_sandbox_id.to_string()))?;
        let record = handle.lock().await.clone();
        let host_network = record
            .config
            .linux
            .and_then(|linux| linux.security_context)
            .and_then(|context| context.namespace_options)
            .is_some_and(|options| options.network() == NamespaceMode::Node);
        let netns = if host_network {
            None
        } else {
            Some(record.namespaces.get("net").cloned().ok_or_else(|| {
                SessionError::Failed(format!(
                    "pod sandbox {} has no network namespace",
                    record.id
                ))
            })?)
        };
        netns::connect(netns, port).await
    }
}
