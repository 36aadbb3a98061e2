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
        // already stopped them gracefully); the pod layer does both.
        self.pods().stop(&request.pod_sandbox_id).await?;
        Ok(StopPodSandboxResponse {})
    }
}
