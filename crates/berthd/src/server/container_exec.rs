//! `Exec`: check the request, then hand out a single-use URL on the
//! streaming server, where the session runs (through
//! `crate::stream_runtime::ContainerStreams`).

use berth_stream::ExecSpec;
use cri_api::v1::{ExecRequest, ExecResponse};
use tonic::Status;

use super::streaming::{check_streams, url_error};
use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_exec(&self, request: ExecRequest) -> Result<ExecResponse, Status> {
        require("container_id", &request.container_id)?;
        if request.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd is required"));
        }
        super::exec_sync::check_command(&request.cmd)?;
        check_streams(request.stdin, request.stdout, request.stderr, request.tty)?;
        let container_id = self.require_running(&request.container_id).await?;
        let url = self
            .context()
            .streams
            .exec_url(ExecSpec {
                container_id,
                cmd: request.cmd,
                tty: request.tty,
                stdin: request.stdin,
                stdout: request.stdout,
                stderr: request.stderr,
            })
            .map_err(url_error)?;
        Ok(ExecResponse { url })
    }
}
