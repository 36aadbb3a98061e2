//! `CheckpointContainer`: not served (berth has no checkpoint/restore).

use cri_api::v1::{CheckpointContainerRequest, CheckpointContainerResponse};
use tonic::Status;

use super::{unimplemented, CriService};

impl CriService {
    pub(super) async fn serve_checkpoint_container(
        &self,
        _request: CheckpointContainerRequest,
    ) -> Result<CheckpointContainerResponse, Status> {
        Err(unimplemented("CheckpointContainer"))
    }
}
