//! The CRI gRPC services. Like containerd's `internal/cri/server`, each RPC
//! family lives in its own file; `runtime_service.rs` and `image_service.rs`
//! only route the generated traits to them.

mod container_exec;
mod container_run;
mod container_stats;
mod container_status;
mod container_stream;
mod events;
mod image_fs_info;
mod image_pull;
mod image_remove;
mod image_service;
mod image_status;
mod metrics_descriptors;
mod runtime_config;
mod runtime_metrics;
mod runtime_service;
mod runtime_update;
mod sandbox_run;
mod sandbox_stats;
mod sandbox_status;
mod status;
mod version;

use std::pin::Pin;
use std::sync::Arc;

use berth_image::pull::ImagePuller;
use berth_stream::StreamServer;

use crate::container::ContainerManager;
use crate::sandbox::SandboxManager;
use tonic::Status;

use crate::cgroup_driver::CgroupDriver;
use crate::config::Config;

/// What every handler may read: settled at start-up, never changed after.
pub struct RuntimeContext {
    pub config: Config,
    /// Resolved once from `config.cgroup_driver` (KEP-4033).
    pub cgroup_driver: CgroupDriver,
    /// The image store and the puller that fills it.
    pub images: Arc<ImagePuller>,
    /// Pod sandboxes.
    pub sandboxes: Arc<SandboxManager>,
    /// Containers.
    pub containers: Arc<ContainerManager>,
    /// Lifecycle events for `GetContainerEvents`.
    pub events: Arc<crate::events::EventBus>,
    /// Notices containers exiting on their own (none without inotify).
    pub exit_watcher: Option<crate::events::ExitWatcher>,
    /// berthd's own Prometheus metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The previous cpu sample of each container and pod, for nano-cores.
    pub cpu_samples: crate::cpu_rate::CpuSamples,
    /// The streaming server that Exec, Attach and PortForward hand URLs of.
    pub streams: StreamServer,
}

/// Serves both CRI services (`RuntimeService` and `ImageService`).
#[derive(Clone)]
pub struct CriService {
    context: Arc<RuntimeContext>,
}

impl CriService {
    pub fn new(context: RuntimeContext) -> Self {
        Self {
            context: Arc::new(context),
        }
    }

    pub fn context(&self) -> &RuntimeContext {
        &self.context
    }
}

/// The response stream type of server-streaming RPCs.
pub type ResponseStream<T> =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// `field` must be set: InvalidArgument naming it otherwise.
pub(crate) fn require(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

/// The error for an RPC berth does not serve yet; it names the RPC so a
/// client's log says exactly what is missing.
pub(crate) fn unimplemented(rpc: &str) -> Status {
    Status::unimplemented(format!("{rpc} is not implemented by berth yet"))
}
