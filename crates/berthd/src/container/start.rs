//! StartContainer.

use std::time::Duration;

use berth_shim_api::protocol::{Request, Response};

use super::store::StartMark;
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
            Ok(Response::Ok) => {
                self.keep_start(id).await;
                Ok(())
            }
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

    /// Keeps in the record that the container was started: what its status
    /// says when its shim does not answer. The start itself succeeded, so
    /// a record that cannot be written is logged, not an error (such a
    /// container reads as created while its shim does not answer).
    async fn keep_start(&self, id: &str) {
        let Ok(handle) = self.handle(id) else {
            return;
        };
        let mut record = handle.lock().await;
        record.start = StartMark::Started(berth_shim_api::timestamp::now());
        if let Err(err) = self.store.persist(&record) {
            tracing::warn!(container = %id, error = %err, "keeping the start in the record");
        }
    }
}
