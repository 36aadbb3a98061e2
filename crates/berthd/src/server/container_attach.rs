//! `Attach`: check the request, then hand out a single-use URL on the
//! streaming server, where the attacher is served.

use berth_stream::AttachSpec;
use cri_api::v1::{AttachRequest, AttachResponse};
use tonic::Status;

use super::streaming::{check_streams, url_error};
use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_attach(
        &self,
        request: AttachRequest,
    ) -> Result<AttachResponse, Status> {
        require("container_id", &request.container_id)?;
        check_streams(request.stdin, request.stdout, request.stderr, request.tty)?;
        let container_id = self.require_running(&request.container_id).await?;
        let url = self
            .context()
            .streams
            .attach_url(AttachSpec {
                container_id,
                tty: request.tty,
                stdin: request.stdin,
                stdout: request.stdout,
                stderr: request.stderr,
            })
            .map_err(url_error)?;
        Ok(AttachResponse { url })
    }
}
