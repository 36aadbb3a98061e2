//! `Exec`, `Attach` and `PortForward`: check the request, then hand out a
//! single-use URL on the streaming server, where the client's session runs
//! (through `crate::stream_runtime::ContainerStreams`).

use berth_shim_api::protocol::ShimStatus;
use berth_stream::{AttachSpec, ExecSpec, TokenError};
use cri_api::v1::{
    AttachRequest, AttachResponse, ExecRequest, ExecResponse, PortForwardRequest,
    PortForwardResponse,
};
use tonic::Status;

use super::{require, CriService};
use crate::sandbox::store::SandboxState;

/// The stdio a session asks for: at least one stream, and no stderr with
/// a tty (a terminal merges it into stdout), as containerd checks.
fn check_streams(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> Result<(), Status> {
    if !(stdin || stdout || stderr) {
        return Err(Status::invalid_argument(
            "one of stdin, stdout, or stderr must be set",
        ));
    }
    if tty && stderr {
        return Err(Status::invalid_argument(
            "tty and stderr cannot both be true",
        ));
    }
    Ok(())
}

fn url_error(err: TokenError) -> Status {
    match err {
        TokenError::TooMany => Status::resource_exhausted(err.to_string()),
        TokenError::Random(_) => Status::internal(err.to_string()),
    }
}

impl CriService {
    /// The container's full id; NotFound for an unknown container,
    /// FailedPrecondition unless it runs.
    async fn require_running(&self, id: &str) -> Result<String, Status> {
        let containers = &self.context().containers;
        let record = containers.get(id).await?;
        match containers.state(&record).await {
            Some(state) if state.status == ShimStatus::Running => Ok(record.id),
            _ => Err(Status::failed_precondition(format!(
                "container {id:?} is not running"
            ))),
        }
    }

    pub(super) async fn serve_exec(&self, request: ExecRequest) -> Result<ExecResponse, Status> {
        require("container_id", &request.container_id)?;
        if request.cmd.is_empty() {
            return Err(Status::invalid_argument("cmd is required"));
        }
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

    pub(super) async fn serve_port_forward(
        &self,
        request: PortForwardRequest,
    ) -> Result<PortForwardResponse, Status> {
        let id = &request.pod_sandbox_id;
        require("pod_sandbox_id", id)?;
        let handle = self
            .context()
            .sandboxes
            .find(id)?
            .ok_or_else(|| Status::not_found(format!("pod sandbox {id:?} not found")))?;
        let record = handle.lock().await.clone();
        if record.effective_state() != SandboxState::Ready {
            return Err(Status::failed_precondition(format!(
                "pod sandbox {id:?} is not ready"
            )));
        }
        // The full id: the request may have named the sandbox by a prefix.
        let url = self
            .context()
            .streams
            .port_forward_url(&record.id)
            .map_err(url_error)?;
        Ok(PortForwardResponse { url })
    }
}
