//! `ExecSync`: run a command in a container and wait for its output.

use cri_api::v1::{ExecSyncRequest, ExecSyncResponse};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_exec_sync(
        &self,
        request: ExecSyncRequest,
    ) -> Result<ExecSyncResponse, Status> {
        require("container_id", &request.container_id)?;
        if request.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd must not be empty"));
        }
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
}
