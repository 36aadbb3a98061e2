//! `CheckpointPod` (KEP-5823): CRIU dumps each of the pod's selected
//! containers into one checkpoint in `output_path` (`crate::pod`,
//! `crate::pod_checkpoint`); the containers run on.

use std::time::Duration;

use cri_api::v1::{CheckpointPodRequest, CheckpointPodResponse};
use tonic::Status;

use super::{require, to_completion, CriService};
use crate::pod_checkpoint::CheckpointPod;

impl CriService {
    pub(super) async fn serve_checkpoint_pod(
        &self,
        request: CheckpointPodRequest,
    ) -> Result<CheckpointPodResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        require("output_path", &request.output_path)?;
        let pods = self.pods();
        // Finished (or undone) even when the client stops waiting: a dump
        // cut off halfway would leave its staging dir in the caller's.
        to_completion(async move {
            pods.checkpoint(CheckpointPod {
                pod_sandbox_id: &request.pod_sandbox_id,
                output_path: &request.output_path,
                container_ids: &request.container_ids,
                options: &request.options,
                timeout: Duration::ZERO,
            })
            .await
            .map_err(Status::from)
        })
        .await?;
        Ok(CheckpointPodResponse {})
    }
}
