//! `UpdatePodSandboxResources`: not served yet (kubelet tolerates
//! `UNIMPLEMENTED` here and resizes the containers one by one).

use cri_api::v1::{UpdatePodSandboxResourcesRequest, UpdatePodSandboxResourcesResponse};
use tonic::Status;

use super::{unimplemented, CriService};

impl CriService {
    pub(super) async fn serve_update_pod_sandbox_resources(
        &self,
        _request: UpdatePodSandboxResourcesRequest,
    ) -> Result<UpdatePodSandboxResourcesResponse, Status> {
        Err(unimplemented("UpdatePodSandboxResources"))
    }
}
