//! What the metrics endpoint samples at each scrape: pods and containers
//! by state, and the shims alive.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use berth_shim_api::protocol::RunState;

use crate::container::ContainerManager;
use crate::metrics::{Sampler, Snapshot};
use crate::sandbox::store::SandboxState;
use crate::sandbox::SandboxManager;

/// The sampler handed to the metrics endpoint.
pub fn sampler(sandboxes: Arc<SandboxManager>, containers: Arc<ContainerManager>) -> Sampler {
    Arc::new(move || {
        let sandboxes = sandboxes.clone();
        let containers = containers.clone();
        Box::pin(async move { snapshot(&sandboxes, &containers).await })
    })
}

async fn snapshot(sandboxes: &SandboxManager, containers: &ContainerManager) -> Snapshot {
    let mut pods: BTreeMap<String, i64> = BTreeMap::new();
    for record in sandboxes.store.published_all() {
        let state = match record.state {
            SandboxState::Ready => "ready",
            _ => "notready",
        };
        *pods.entry(state.to_string()).or_default() += 1;
    }
    let mut containers_by_state: BTreeMap<String, i64> = BTreeMap::new();
    let mut shims = 0;
    for record in containers.store.published_all() {
        let state = match containers.state(&record).await {
            Some(info) => match info.status {
                RunState::Created => "created",
                RunState::Running => "running",
                RunState::Stopped => "exited",
            },
            None => "unknown",
        };
        *containers_by_state.entry(state.to_string()).or_default() += 1;
        if shim_alive(&record.shim_dir) {
            shims += 1;
        }
    }
    Snapshot {
        pods_by_state: pods.into_iter().collect(),
        containers_by_state: containers_by_state.into_iter().collect(),
        shims,
    }
}

/// Whether the shim whose pid file is in `dir` still runs.
fn shim_alive(dir: &Path) -> bool {
    crate::container::shim::recorded_pid(dir)
        .is_some_and(|pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok())
}
