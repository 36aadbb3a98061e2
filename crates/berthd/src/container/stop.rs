//! StopContainer: the stop signal, SIGKILL after the timeout.

use std::time::Duration;

use berth_shim_api::protocol::{Request, SignalArg};
use nix::sys::signal::Signal;

use super::store::ContainerRecord;
use super::{ContainerError, ContainerManager};

impl ContainerManager {
    /// StopContainer: the stop signal, then SIGKILL after `timeout`
    /// seconds. Stopped or unknown is success.
    pub async fn stop(&self, id: &str, timeout: i64) -> Result<(), ContainerError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let record = handle.lock().await.clone();
        if !self.is_running(&record).await {
            return Ok(());
        }
        let timeout = super::durations::clamp_timeout_seconds(timeout);
        if timeout > 0 {
            let _ = self
                .shims
                .call(
                    &record.shim_dir,
                    Request::Kill {
                        signal: SignalArg::Number(record.stop_signal),
                        all: false,
                    },
                    Duration::ZERO,
                )
                .await;
            if self
                .wait_stopped(&record, Duration::from_secs(timeout))
                .await
            {
                return Ok(());
            }
        }
        let _ = self
            .shims
            .call(
                &record.shim_dir,
                Request::Kill {
                    signal: SignalArg::Number(Signal::SIGKILL as i32),
                    all: true,
                },
                Duration::ZERO,
            )
            .await;
        if self.wait_stopped(&record, Duration::from_secs(10)).await {
            Ok(())
        } else {
            Err(ContainerError::DidNotStop { id: record.id })
        }
    }

    /// Polls the shim until the container is no longer running. The interval
    /// starts at 1 ms and doubles up to 50 ms: most containers exit within a few
    /// ms of their stop signal, and a fixed 50 ms made every StopContainer last
    /// at least that long.
    pub(super) async fn wait_stopped(&self, record: &ContainerRecord, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit.min(super::durations::MAX_REQUEST_WAIT);
        let mut interval = Duration::from_millis(1);
        loop {
            if !self.is_running(record).await {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(Duration::from_millis(50));
        }
    }
}
