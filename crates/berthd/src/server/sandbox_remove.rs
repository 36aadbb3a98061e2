//! `RemovePodSandbox`.

use cri_api::v1::{RemovePodSandboxRequest, RemovePodSandboxResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_remove_pod_sandbox(
        &self,
        request: RemovePodSandboxRequest,
    ) -> Result<RemovePodSandboxResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let sandbox_id = self.full_sandbox_id(&request.pod_sandbox_id).await?;
        for container in self.sandbox_containers(&request.pod_sandbox_id).await? {
            self.context().containers.remove(&container).await?;
            if let Some(sandbox_id) = &sandbox_id {
                self.emit_removed(&container, sandbox_id).await;
            }
        }
        self.context()
            .sandboxes
            .remove(&request.pod_sandbox_id)
            .await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.emit_removed(sandbox_id, sandbox_id).await;
        }
        Ok(RemovePodSandboxResponse {})
    }
}
