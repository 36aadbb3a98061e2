//! StopContainer: the stop signal, SIGKILL after the timeout.

use std::time::Duration;

use berth_cgroups::{CgroupError, CgroupManager};
use berth_shim_api::protocol::{Request, RunState, SignalArg};
use nix::sys::signal::Signal;

use super::store::ContainerRecord;
use super::{ContainerError, ContainerManager};

impl ContainerManager {
    /// StopContainer: the stop signal, then SIGKILL after `timeout`
    /// seconds. Stopped or unknown is success; a container whose shim is
    /// gone is killed through its cgroup.
    pub async fn stop(&self, id: &str, timeout: i64) -> Result<(), ContainerError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let record = handle.lock().await.clone();
        match self.shims.state(&record.shim_dir).await {
            Some(state) if state.status == RunState::Running => {}
            Some(_) => return Ok(()),
            None => return self.stop_without_shim(&record).await,
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

    /// A container whose shim is gone (killed, OOM-killed) while it was
    /// created or running: nothing can signal it but its cgroup. Its
    /// processes are killed there, and its end recorded as unknown, as
    /// containerd does (exit code 255). Success only once none is left.
    pub(super) async fn stop_without_shim(
        &self,
        record: &ContainerRecord,
    ) -> Result<(), ContainerError> {
        // Removed meanwhile (RemoveContainer racing a pod's stop, which
        // kubelet does): the shim went with it, nothing is left to stop.
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        if self.shims.is_alive(&record.shim_dir) {
            // Alive but not answering: it may still report the real exit.
            return Err(ContainerError::ShimUnreachable {
                id: record.id.clone(),
                source: std::io::Error::other("the shim runs but does not answer"),
            });
        }
        tracing::warn!(container = %record.id, "its shim is gone: killing it through its cgroup");
        self.kill_cgroup(record).await?;
        match self.shims.record_unknown_exit(&record.shim_dir) {
            Err(_) if !self.store.contains(&record.id) => Ok(()),
            // A RemoveContainer that berthd died in had torn down the shim
            // dir already (the record goes last, with the bundle): nothing
            // runs (the cgroup is empty) and the remove that follows ends
            // the container, so there is no exit to record.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !record.shim_dir.exists() => {
                Ok(())
            }
            written => written.map_err(|err| ContainerError::io("recording an unknown exit", err)),
        }
    }

    /// Kills every process in the container's cgroup, waiting until none
    /// is left.
    pub(super) async fn kill_cgroup(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        self.on_cgroup(record, "killing a cgroup", |cgroups, path| {
            cgroups.kill(path)
        })
        .await
    }

    /// Runs `op` on the container's cgroup through the driver's manager (it
    /// waits and may talk to systemd: on a blocking thread).
    pub(super) async fn on_cgroup(
        &self,
        record: &ContainerRecord,
        what: &'static str,
        op: impl FnOnce(&dyn CgroupManager, &str) -> Result<(), CgroupError> + Send + 'static,
    ) -> Result<(), ContainerError> {
        self.on_cgroup_path(record.cgroup_dir(), what, op).await
    }

    /// Runs `op` on the cgroup `path` (as `ContainerRecord::cgroup_dir`).
    pub(super) async fn on_cgroup_path(
        &self,
        path: &str,
        what: &'static str,
        op: impl FnOnce(&dyn CgroupManager, &str) -> Result<(), CgroupError> + Send + 'static,
    ) -> Result<(), ContainerError> {
        let cgroups = self.sandboxes.cgroups.clone();
        let path = path.to_string();
        tokio::task::spawn_blocking(move || op(cgroups.as_ref(), &path))
            .await
            .map_err(|err| ContainerError::Task { what, source: err })?
            .map_err(|err| ContainerError::Cgroup(Box::new(err)))
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
