//! ExecSync: a command run to completion by the shim.

use std::time::Duration;

use berth_shim_api::protocol::{ExecRequest, Request, Response};

use super::{shim_answer, shim_unreachable, ContainerError, ContainerManager};

impl ContainerManager {
    /// ExecSync: runs a command in the container, returning its output.
    /// The handler has checked that `args` is not empty.
    pub async fn exec_sync(
        &self,
        id: &str,
        args: Vec<String>,
        timeout: i64,
    ) -> Result<berth_shim_api::protocol::ExecResult, ContainerError> {
        let record = self.get(id).await?;
        let timeout_s = super::durations::clamp_timeout_seconds(timeout);
        // No timeout: CRI runs the command until it ends, or until kubelet
        // gives up on the call (a preStop hook past the grace period),
        // which drops this call and so kills the command.
        let wait = if timeout_s == 0 {
            super::shim::UNTIL_ANSWERED
        } else {
            Duration::from_secs(timeout_s)
        };
        let request = Request::Exec(ExecRequest {
            args,
            env: Vec::new(),
            cwd: None,
            user: None,
            timeout_s,
            max_output_bytes: None,
        });
        match self.shims.call(&record.shim_dir, request, wait).await {
            Ok(Response::Exec(result)) => Ok(result),
            Ok(Response::Error { message, .. }) => Err(ContainerError::ExecRefused {
                id: record.id,
                message,
            }),
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }
}
