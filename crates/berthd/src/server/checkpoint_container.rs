//! `CheckpointContainer` (KEP-2008): CRIU dumps the running container and
//! berthd writes a checkpoint archive at `location`; the container runs on.

use std::time::Duration;

use cri_api::v1::{CheckpointContainerRequest, CheckpointContainerResponse};
use tonic::Status;

use super::{require, to_completion, CriService};
use crate::container::archive_path;

impl CriService {
    pub(super) async fn serve_checkpoint_container(
        &self,
        request: CheckpointContainerRequest,
    ) -> Result<CheckpointContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        require("location", &request.location)?;
        let location = archive_path(&request.location).ok_or_else(|| {
            Status::invalid_argument(format!(
                "location {:?} must be an absolute path to the archive file",
                request.location
            ))
        })?;
        let timeout = Duration::from_secs(crate::container::durations::clamp_timeout_seconds(
            request.timeout,
        ));
        let containers = self.context().containers.clone();
        // The dump must not be cut off halfway (its work dir would stay):
        // it finishes even if kubelet stops waiting.
        to_completion(async move {
            containers
                .checkpoint(&request.container_id, &location, timeout)
                .await
                .map_err(Status::from)
        })
        .await?;
        Ok(CheckpointContainerResponse {})
    }
}
