//! The pod layer: work that spans a pod and its containers, above the
//! sandbox and container managers. Stop and remove of a pod (its
//! containers first), pod checkpoint and restore, each with its lifecycle
//! events in order, and the pod's own usage (its cgroups summed, its
//! network). `server/` handlers validate, call this once, and
//! convert; neither manager knows of the other's objects' lifecycle.

mod checkpoint;
mod error;
mod events;
mod members;
mod remove;
mod restore;
mod run;
mod stats;
mod stop;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use crate::container::ContainerManager;
use crate::sandbox::SandboxManager;

pub use self::error::PodError;
pub use self::events::{Lifecycle, PodEvents};
pub use self::stats::{cgroup_reading, network, NetSample};

/// Pod-wide work over the two managers; cheap to make (three `Arc`s).
#[derive(Clone)]
pub struct Pods {
    sandboxes: Arc<SandboxManager>,
    containers: Arc<ContainerManager>,
    events: Arc<dyn PodEvents>,
}

impl Pods {
    pub fn new(
        sandboxes: Arc<SandboxManager>,
        containers: Arc<ContainerManager>,
        events: Arc<dyn PodEvents>,
    ) -> Self {
        Self {
            sandboxes,
            containers,
            events,
        }
    }
}
