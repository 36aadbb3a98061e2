//! `RestorePod` (KEP-5823, alpha in Kubernetes 1.37): not built yet, as
//! `CheckpointPod` makes no pod archive to restore from.

use cri_api::v1::{RestorePodRequest, RestorePodResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) fn serve_restore_pod(
        &self,
        request: RestorePodRequest,
    ) -> Result<RestorePodResponse, Status> {
        require("checkpoint_path", &request.checkpoint_path)?;
        Err(Status::unimplemented(
            "RestorePod is not implemented by berth; a checkpointed container is restored by CreateContainer from its archive",
        ))
    }
}
