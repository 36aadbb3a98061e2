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
        check_command(&request.cmd)?;
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

/// The kernel's limit on one argument or environment string
/// (`MAX_ARG_STRLEN`).
const MAX_ARG_BYTES: usize = 128 * 1024;
/// What a process's arguments (and environment) may add up to: well
/// under the shim's 1 MiB request line and the kernel's argument space.
const MAX_CMD_BYTES: usize = 512 * 1024;

/// A command the kernel cannot exec is refused here: one argument over
/// `MAX_ARG_STRLEN` (E2BIG) left the exec, and with it every later call to
/// the container's shim, hanging. A NUL cannot be in an argument at all.
pub(super) fn check_command(cmd: &[String]) -> Result<(), Status> {
    let args: Vec<&[u8]> = cmd.iter().map(String::as_bytes).collect();
    check_exec_strings("cmd", &args)
}

/// Strings that become a process's argv or environment (`field` names
/// them in the error): each under `MAX_ARG_STRLEN`, all together at most
/// [`MAX_CMD_BYTES`], none with a NUL.
pub(super) fn check_exec_strings(field: &str, strings: &[&[u8]]) -> Result<(), Status> {
    if let Some(arg) = strings.iter().find(|arg| arg.len() >= MAX_ARG_BYTES) {
        return Err(Status::invalid_argument(format!(
            "{field}: a string of {} bytes is over the kernel's limit of {MAX_ARG_BYTES}",
            arg.len()
        )));
    }
    let total: usize = strings.iter().map(|arg| arg.len() + 1).sum();
    if total > MAX_CMD_BYTES {
        return Err(Status::invalid_argument(format!(
            "{field}: {total} bytes in all, more than {MAX_CMD_BYTES}"
        )));
    }
    if strings.iter().any(|arg| arg.contains(&0)) {
        return Err(Status::invalid_argument(format!(
            "{field}: a string contains NUL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_the_kernel_cannot_exec_are_invalid() {
        assert!(check_command(&["/bin/true".into(), "x".repeat(1000)]).is_ok());
        for cmd in [
            vec!["/bin/true".to_string(), "x".repeat(200 * 1024)],
            vec!["/bin/true".to_string(); 100_000],
            vec!["true\0".to_string()],
        ] {
            let err = check_command(&cmd).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().starts_with("cmd"), "{err:?}");
        }
    }
}
