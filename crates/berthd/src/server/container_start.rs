//! `StartContainer`.

use cri_api::v1::{ContainerEventType, StartContainerRequest, StartContainerResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_start_container(
        &self,
        request: StartContainerRequest,
    ) -> Result<StartContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .start(&request.container_id)
            .await?;
        let record = self.context().containers.get(&request.container_id).await?;
        self.emit_container_event(
            &record.id,
            &record.sandbox_id,
            ContainerEventType::ContainerStartedEvent,
        )
        .await;
        // Watched only once STARTED is out, so STOPPED cannot overtake it.
        self.watch_exit(&record);
        Ok(StartContainerResponse {})
    }
}
