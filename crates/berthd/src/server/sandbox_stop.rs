//! `StopPodSandbox`.

use cri_api::v1::{StopPodSandboxRequest, StopPodSandboxResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_stop_pod_sandbox(
        &self,
        request: StopPodSandboxRequest,
    ) -> Result<StopPodSandboxResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        // CRI: stopping a sandbox force-stops its containers (kubelet has
        // already stopped them gracefully).
        let sandbox_id = self.full_sandbox_id(&request.pod_sandbox_id).await?;
        for container in self.sandbox_containers(&request.pod_sandbox_id).await? {
            self.context().containers.stop(&container, 0).await?;
            if let Some(sandbox_id) = &sandbox_id {
                self.emit_stopped(&container, sandbox_id).await;
            }
        }
        self.context()
            .sandboxes
            .stop(&request.pod_sandbox_id)
            .await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.emit_stopped(sandbox_id, sandbox_id).await;
        }
        Ok(StopPodSandboxResponse {})
    }
}
