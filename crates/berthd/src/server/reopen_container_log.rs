//! `ReopenContainerLog`: the shim reopens the log file kubelet rotated.

use cri_api::v1::{ReopenContainerLogRequest, ReopenContainerLogResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_reopen_container_log(
        &self,
        request: ReopenContainerLogRequest,
    ) -> Result<ReopenContainerLogResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .reopen_log(&request.container_id)
            .await?;
        Ok(ReopenContainerLogResponse {})
    }
}
