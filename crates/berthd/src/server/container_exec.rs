//! `ExecSync`, `UpdateContainerResources` and `ReopenContainerLog`.

use cri_api::v1::{
    ExecSyncRequest, ExecSyncResponse, ReopenContainerLogRequest, ReopenContainerLogResponse,
    UpdateContainerResourcesRequest, UpdateContainerResourcesResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_exec_sync(
        &self,
        request: ExecSyncRequest,
    ) -> Result<ExecSyncResponse, Status> {
        require("container_id", &request.container_id)?;
        let result = self
            .context()
            .containers
            .exec_sync(&request.container_id, request.cmd, request.timeout)
            .await?;
        if result.timed_out {
            return Err(Status::deadline_exceeded(format!(
                "command timed out after {} s",
                request.timeout
            )));
        }
        Ok(ExecSyncResponse {
            stdout: result.stdout,
            stderr: result.stderr,
            exit_code: result.exit_code,
        })
    }

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
