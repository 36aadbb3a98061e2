//! `UpdateContainerResources`.

use cri_api::v1::{UpdateContainerResourcesRequest, UpdateContainerResourcesResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_update_container_resources(
        &self,
        request: UpdateContainerResourcesRequest,
    ) -> Result<UpdateContainerResourcesResponse, Status> {
        require("container_id", &request.container_id)?;
        let resources = request
            .linux
            .ok_or_else(|| Status::invalid_argument("linux resources are required"))?;
        self.context()
            .containers
            .update_resources(&request.container_id, &resources)
            .await?;
        Ok(UpdateContainerResourcesResponse {})
    }
}
