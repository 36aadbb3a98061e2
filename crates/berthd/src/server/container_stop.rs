//! `StopContainer`.

use cri_api::v1::{StopContainerRequest, StopContainerResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_stop_container(
        &self,
        request: StopContainerRequest,
    ) -> Result<StopContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .stop(&request.container_id, request.timeout)
            .await?;
        if let Ok(record) = self.context().containers.get(&request.container_id).await {
            self.emit_stopped(&record.id, &record.sandbox_id).await;
        }
        Ok(StopContainerResponse {})
    }
}
