//! What the metrics endpoint samples at each scrape: pods and containers
//! by state, and the shims alive.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use berth_shim_api::files::ShimFiles;
use berth_shim_api::protocol::ShimStatus;

use super::CriService;
use crate::metrics::{Sampler, Snapshot};
use crate::sandbox::store::SandboxState;

impl CriService {
    /// The sampler handed to the metrics endpoint.
    pub fn metrics_sampler(&self) -> Sampler {
        let service = self.clone();
        Arc::new(move || {
            let service = service.clone();
            Box::pin(async move { service.snapshot().await })
        })
    }

    async fn snapshot(&self) -> Snapshot {
        let mut pods: BTreeMap<String, i64> = BTreeMap::new();
        for handle in self.context().sandboxes.store.all() {
            let state = match handle.lock().await.state {
                SandboxState::Ready => "ready",
                _ => "notready",
            };
            *pods.entry(state.to_string()).or_default() += 1;
        }
        let mut containers: BTreeMap<String, i64> = BTreeMap::new();
        let mut shims = 0;
        for handle in self.context().containers.store.all() {
            let record = handle.lock().await.clone();
            let state = match self.context().containers.state(&record).await {
                Some(info) => match info.status {
                    ShimStatus::Created => "created",
                    ShimStatus::Running => "running",
                    ShimStatus::Stopped => "exited",
                },
                None => "unknown",
            };
            *containers.entry(state.to_string()).or_default() += 1;
            if shim_alive(&record.shim_dir) {
                shims += 1;
            }
        }
        Snapshot {
            pods_by_state: pods.into_iter().collect(),
            containers_by_state: containers.into_iter().collect(),
            shims,
        }
    }
}

/// Whether the shim whose pid file is in `dir` still runs.
fn shim_alive(dir: &Path) -> bool {
    std::fs::read_to_string(ShimFiles::new(dir.to_path_buf()).shim_pid())
        .ok()
        .and_then(|pid| pid.trim().parse::<i32>().ok())
        .is_some_and(|pid| {
            pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        })
}
