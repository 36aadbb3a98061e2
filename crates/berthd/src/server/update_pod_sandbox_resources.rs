//! `UpdatePodSandboxResources` (KEP-5419): kubelet has resized the pod's
//! cgroup and sends the pod-level totals; berth records them and applies
//! them to the pod's cgroup parent (`sandbox/update.rs`).

use cri_api::v1::{UpdatePodSandboxResourcesRequest, UpdatePodSandboxResourcesResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_update_pod_sandbox_resources(
        &self,
        request: UpdatePodSandboxResourcesRequest,
    ) -> Result<UpdatePodSandboxResourcesResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        self.context()
            .sandboxes
            .update_resources(&request.pod_sandbox_id, request.overhead, request.resources)
            .await?;
        Ok(UpdatePodSandboxResourcesResponse {})
    }
}
