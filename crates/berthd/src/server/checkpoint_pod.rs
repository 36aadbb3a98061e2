//! `CheckpointPod` (KEP-5823, alpha in Kubernetes 1.37): not built yet.
//! A pod's containers are checkpointed one by one with
//! `CheckpointContainer`; a whole-pod archive is still to come.

use cri_api::v1::{CheckpointPodRequest, CheckpointPodResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) fn serve_checkpoint_pod(
        &self,
        request: CheckpointPodRequest,
    ) -> Result<CheckpointPodResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        Err(Status::unimplemented(
            "CheckpointPod is not implemented by berth; checkpoint each container with CheckpointContainer",
        ))
    }
}
