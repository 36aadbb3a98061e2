//! `RunPodSandbox`.

use cri_api::v1::{
    ContainerEventType, NamespaceMode, PodSandboxConfig, RunPodSandboxRequest,
    RunPodSandboxResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_run_pod_sandbox(
        &self,
        request: RunPodSandboxRequest,
    ) -> Result<RunPodSandboxResponse, Status> {
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        check_config(&config)?;
        let pod_sandbox_id = self
            .context()
            .sandboxes
            .run(config, &request.runtime_handler)
            .await?;
        tracing::info!(sandbox = %pod_sandbox_id, "pod sandbox ready");
        for kind in [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
        ] {
            self.emit_sandbox_event(&pod_sandbox_id, kind).await;
        }
        Ok(RunPodSandboxResponse { pod_sandbox_id })
    }
}

/// What the manager relies on: the pod is named, and asks for no PID mode
/// only containers can have.
fn check_config(config: &PodSandboxConfig) -> Result<(), Status> {
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    require("config.metadata.name", &metadata.name)?;
    require("config.metadata.namespace", &metadata.namespace)?;
    require("config.metadata.uid", &metadata.uid)?;
    let pid = config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .and_then(|context| context.namespace_options.as_ref())
        .map(|options| options.pid());
    if pid == Some(NamespaceMode::Target) {
        return Err(Status::invalid_argument(
            "namespace_options.pid TARGET is for containers, not sandboxes",
        ));
    }
    Ok(())
}
