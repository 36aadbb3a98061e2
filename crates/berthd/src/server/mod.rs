//! The CRI gRPC services. Like containerd's `internal/cri/server`, each RPC
//! has its own file named after it (`container_create.rs` for
//! `CreateContainer`, `list_images.rs` for `ListImages`) holding its
//! `serve_<rpc>` handler; `runtime_service.rs` and `image_service.rs` only
//! route the generated traits to them. The other files are what several
//! handlers share: `lifecycle_events.rs` (emitting events),
//! `streaming.rs` (Exec/Attach/PortForward checks), `pod_members.rs` (the
//! pod layer, `crate::pod`, over the context),
//! `cadvisor_metrics.rs` (usage as cadvisor metrics).

mod cadvisor_metrics;
mod checkpoint_container;
mod checkpoint_pod;
mod container_attach;
mod container_create;
mod container_exec;
mod container_remove;
mod container_start;
mod container_stats;
mod container_status;
mod container_stop;
mod errors;
mod exec_sync;
#[cfg(test)]
mod fake_service;
mod filters;
mod get_container_events;
mod image_fs_info;
mod image_pull;
mod image_remove;
mod image_service;
mod image_status;
pub mod instrument;
mod lifecycle_events;
mod list_container_stats;
mod list_containers;
mod list_images;
mod list_metric_descriptors;
mod list_pod_sandbox;
mod list_pod_sandbox_metrics;
mod list_pod_sandbox_stats;
mod metrics_cache;
#[cfg(test)]
mod pod_handler_tests;
mod pod_members;
mod reopen_container_log;
mod restore_pod;
mod runtime_config;
mod runtime_service;
mod sandbox_port_forward;
mod sandbox_remove;
mod sandbox_run;
mod sandbox_stats;
mod sandbox_status;
mod sandbox_stop;
mod status;
mod stream_container_stats;
mod stream_containers;
mod stream_images;
mod stream_pod_sandbox_metrics;
mod stream_pod_sandbox_stats;
mod stream_pod_sandboxes;
mod streaming;
mod update_container_resources;
mod update_pod_sandbox_resources;
mod update_runtime_config;
mod version;

use std::pin::Pin;
use std::sync::Arc;

use berth_image::pull::ImagePuller;
use berth_stream::StreamServer;

use crate::container::ContainerManager;
use crate::sandbox::SandboxManager;
use tonic::Status;

use crate::config::Config;

/// What every handler may read: settled at start-up, never changed after,
/// except `config_in_force`, which a reload updates.
pub struct RuntimeContext {
    /// The start-up config; what a reload cannot change is read here.
    pub config: Config,
    /// The config with what reloads applied (`Status` shows it).
    pub config_in_force: crate::reload::ConfigInForce,
    /// Resolved once from `config.cgroup_driver` (KEP-4033).
    pub cgroup_driver: berth_cgroups::Driver,
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
    /// Every container's and pod's usage as last sampled, which the stats
    /// and metrics calls answer from (`stats_collection_period`), and the
    /// last cpu reading of each, for nano-cores.
    pub stats: Arc<crate::stats_sampler::StatsSampler>,
    /// The streaming server that Exec, Attach and PortForward hand URLs of.
    pub streams: StreamServer,
    /// What the kernel can do, probed at start-up.
    pub kernel: crate::kernel_features::KernelFeatures,
    /// ImageFsInfo's last measurement.
    pub fs_usage: crate::fs_usage::FsUsageCache,
}

/// Serves both CRI services (`RuntimeService` and `ImageService`).
#[derive(Clone)]
pub struct CriService {
    context: Arc<RuntimeContext>,
    /// The last ListPodSandboxMetrics answer, kept for one sampler pass.
    kept_metrics: Arc<metrics_cache::MetricsCache>,
}

impl CriService {
    pub fn new(context: RuntimeContext) -> Self {
        Self {
            context: Arc::new(context),
            kept_metrics: Arc::default(),
        }
    }

    pub fn context(&self) -> &RuntimeContext {
        &self.context
    }
}

/// Runs a mutating RPC's work on a task of its own, so it finishes (or
/// undoes itself) whether or not the client still waits. tonic drops a
/// handler's future when the client cancels or its deadline passes; dropped
/// between two steps, a create would never reach its undo and its name
/// would stay reserved.
pub(crate) async fn to_completion<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(work).await.unwrap_or_else(|err| {
        Err(Status::internal(format!(
            "the call's task ended abnormally: {err}"
        )))
    })
}

/// [`to_completion`] for a create. When the client stopped waiting before
/// the create finished, nobody learns the new id, so what was made is
/// removed again by `discard` (containerd's deferred cleanup does the
/// same) and its name freed: the client's retry of the same name succeeds
/// instead of finding it reserved by an object it never heard of.
pub(crate) async fn create_to_completion<T, D, DF>(
    work: impl std::future::Future<Output = Result<T, Status>> + Send + 'static,
    discard: D,
) -> Result<T, Status>
where
    T: Send + 'static,
    D: FnOnce(&T) -> DF + Send + 'static,
    DF: std::future::Future<Output = ()> + Send,
{
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _guard = SetOnDrop(gone.clone());
    to_completion(async move {
        let made = work.await?;
        if gone.load(std::sync::atomic::Ordering::SeqCst) {
            discard(&made).await;
            return Err(Status::cancelled(
                "the client stopped waiting: what the call made is removed again",
            ));
        }
        Ok(made)
    })
    .await
}

/// Sets its flag when dropped: with a handler's future, when the client
/// stops waiting.
struct SetOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The response stream type of server-streaming RPCs.
pub type ResponseStream<T> =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A server-streaming answer: `items` in messages of at most `per_message`
/// each, so a long list never exceeds the gRPC message size limit. No items,
/// no message.
pub(crate) fn stream_in_chunks<T, R>(
    items: Vec<T>,
    per_message: usize,
    message: impl Fn(Vec<T>) -> R,
) -> ResponseStream<R>
where
    T: Clone,
    R: Send + 'static,
{
    let messages: Vec<Result<R, Status>> = items
        .chunks(per_message)
        .map(|chunk| Ok(message(chunk.to_vec())))
        .collect();
    Box::pin(tokio_stream::iter(messages))
}

/// `field` must be set: InvalidArgument naming it otherwise.
pub(crate) fn require(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use tokio_stream::StreamExt;

    use super::*;

    /// The words of a CamelCase or snake_case name, lowercase, plurals
    /// folded, without "pod" (containerd's `sandbox_run` serves
    /// `RunPodSandbox`).
    fn words(name: &str) -> BTreeSet<String> {
        snake(name)
            .split('_')
            .filter(|word| !word.is_empty() && *word != "pod")
            .map(|word| {
                let word = word.strip_suffix("es").unwrap_or(word);
                word.strip_suffix('s').unwrap_or(word).to_string()
            })
            .collect()
    }

    fn snake(name: &str) -> String {
        let mut out = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    /// Every RPC of the CRI proto has its handler, `serve_<rpc>`, in a
    /// file of this directory whose name has the RPC's words: the code of
    /// an RPC is found by its name.
    #[test]
    fn every_rpc_has_a_file_named_after_it() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server");
        let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/api.proto");
        let proto = std::fs::read_to_string(&proto).expect("proto/api.proto");
        let rpcs: Vec<&str> = proto
            .lines()
            .filter_map(|line| line.trim().strip_prefix("rpc "))
            .filter_map(|rest| rest.split('(').next())
            .collect();
        assert!(rpcs.len() > 30, "{rpcs:?}");
        let files: Vec<(String, String)> = std::fs::read_dir(&here)
            .expect("src/server")
            .map(|entry| entry.expect("entry").path())
            .map(|path| {
                let stem = path
                    .file_stem()
                    .expect("stem")
                    .to_string_lossy()
                    .into_owned();
                (stem, std::fs::read_to_string(&path).expect("read"))
            })
            .collect();
        for rpc in rpcs {
            let handler = format!("fn serve_{}(", snake(rpc));
            let home: Vec<&str> = files
                .iter()
                .filter(|(_, text)| text.contains(&handler))
                .map(|(stem, _)| stem.as_str())
                .collect();
            assert_eq!(home.len(), 1, "{rpc}: {handler} in {home:?}");
            assert!(
                words(rpc).is_subset(&words(home[0])),
                "{rpc} is served from {}.rs, whose name does not say so",
                home[0]
            );
        }
    }

    #[tokio::test]
    async fn streams_in_chunks_and_nothing_for_nothing() {
        let sizes: Vec<usize> =
            stream_in_chunks((0..5).collect(), 2, |chunk: Vec<i32>| chunk.len())
                .map(|message| message.expect("ok"))
                .collect()
                .await;
        assert_eq!(sizes, [2, 2, 1]);
        let none: Vec<_> = stream_in_chunks(Vec::<i32>::new(), 2, |chunk| chunk.len())
            .collect()
            .await;
        assert!(none.is_empty());
    }
}
