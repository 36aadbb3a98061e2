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
        self.pods().remove(&request.pod_sandbox_id).await?;
        Ok(RemovePodSandboxResponse {})
    }
}
