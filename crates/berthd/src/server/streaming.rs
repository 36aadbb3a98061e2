//! What `Exec`, `Attach` and `PortForward` share: the stdio check, the
//! running-container check, and the streaming server's errors as gRPC ones.

use berth_shim_api::protocol::RunState;
use berth_stream::TokenError;
use tonic::Status;

use super::CriService;

impl CriService {
    /// The container's full id; NotFound for an unknown container,
    /// FailedPrecondition unless it runs.
    pub(super) async fn require_running(&self, id: &str) -> Result<String, Status> {
        let containers = &self.context().containers;
        let record = containers.get(id).await?;
        match containers.state(&record).await {
            Some(state) if state.status == RunState::Running => Ok(record.id),
            _ => Err(Status::failed_precondition(format!(
                "container {id:?} is not running"
            ))),
        }
    }
}

/// The stdio a session asks for: at least one stream, and no stderr with
/// a tty (a terminal merges it into stdout), as containerd checks.
pub(super) fn check_streams(
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
) -> Result<(), Status> {
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

pub(super) fn url_error(err: TokenError) -> Status {
    match err {
        TokenError::TooMany => Status::resource_exhausted(err.to_string()),
        TokenError::Random(_) => Status::internal(err.to_string()),
    }
}
