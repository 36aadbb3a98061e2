//! ReopenContainerLog.

use std::time::Duration;

use berth_shim_api::protocol::{Request, Response};

use super::{shim_answer, shim_unreachable, ContainerError, ContainerManager};

impl ContainerManager {
    /// ReopenContainerLog.
    pub async fn reopen_log(&self, id: &str) -> Result<(), ContainerError> {
        let record = self.get(id).await?;
        if !self.is_running(&record).await {
            return Err(ContainerError::NotRunning { id: record.id });
        }
        match self
            .shims
            .call(&record.shim_dir, Request::ReopenLog, Duration::ZERO)
            .await
        {
            Ok(Response::Ok) => Ok(()),
            Ok(other) => Err(shim_answer(&record, &other)),
            Err(err) => Err(shim_unreachable(&record, err)),
        }
    }
}
