//! `RemoveContainer`.

use cri_api::v1::{RemoveContainerRequest, RemoveContainerResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_remove_container(
        &self,
        request: RemoveContainerRequest,
    ) -> Result<RemoveContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        let removed = self
            .context()
            .containers
            .get(&request.container_id)
            .await
            .ok();
        self.context()
            .containers
            .remove(&request.container_id)
            .await?;
        if let Some(record) = removed {
            self.emit_removed(&record.id, &record.sandbox_id).await;
        }
        Ok(RemoveContainerResponse {})
    }
}
