//! `RunPodSandbox`.

use cri_api::v1::{ContainerEventType, RunPodSandboxRequest, RunPodSandboxResponse};
use tonic::Status;

use super::CriService;

impl CriService {
    pub(super) async fn serve_run_pod_sandbox(
        &self,
        request: RunPodSandboxRequest,
    ) -> Result<RunPodSandboxResponse, Status> {
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
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
