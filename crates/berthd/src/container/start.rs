//! StartContainer.

use std::time::Duration;

use berth_shim_api::protocol::{Request, Response};

use super::{shim, shim_answer, shim_log, shim_unreachable, ContainerError, ContainerManager};

/// How much longer than other calls a start that restores may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(600);

impl ContainerManager {
    /// StartContainer.
    pub async fn start(&self, id: &str) -> Result<(), ContainerError> {
        let record = self.get(id).await?;
        // CRIU restores every page of the checkpoint before it answers.
        let extra = if record.restore_from.is_some() {
            RESTORE_TIMEOUT
        } else {
            Duration::ZERO
        };
        let answer = self
            .shims
            .call(&record.shim_dir, Request::Start, extra)
            .await;
        // Created to running gives no sign the state cache would see.
        self.states.forget(&record.shim_dir);
        match answer {
            Ok(Response::Ok) => Ok(()),
            // The shim's log stays in its dir until RemoveContainer.
            Ok(Response::Error { message, .. }) => {
                let log = shim::log_path(&record.shim_dir);
                Err(ContainerError::StartFailed {
                    message: shim_log::with_reason(
                        &format!("starting container {}: {message}", record.id),
                        &log,
                        Some(&log),
                    ),
                    id: record.id,
                })
            }
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }
}
