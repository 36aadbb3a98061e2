//! Start-up and shutdown: settle the config, bind the socket, serve until
//! SIGTERM or SIGINT, then remove the socket.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_cgroups::{
    CgroupManager, CgroupfsManager, DbusSystemd, Driver, HostFeatures, ParentTracker,
    SystemdManager,
};
use berth_image::pull::ImagePuller;
use berth_image::store::ImageStore;
use berth_network::cni::CniConfig;
use berth_stream::{StreamServer, StreamServerConfig};
use cri_api::v1::image_service_server::ImageServiceServer;
use cri_api::v1::runtime_service_server::RuntimeServiceServer;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use tokio_stream::wrappers::UnixListenerStream;

use crate::cgroup_driver::{self, RealHost};
use crate::config::{Config, ConfigSource};
use crate::container::host::{CriuBinary, OverlayMounts, ShimProcesses};
use crate::container::store::ContainerStore;
use crate::container::ContainerManager;
use crate::helper_binary::{HelperBinary, HostViews};
use crate::layout::{RootLayout, StateLayout};
use crate::listener;
use crate::registry::registry_hosts;
use crate::root_lock::{RootLock, RootLockError};
use crate::sandbox::host::{Pinns, PodNetworks};
use crate::sandbox::metered_network::MeteredNetworks;
use crate::sandbox::paced_network::{CpuLoad, CpuPressure, PacedNetworks, RunQueue, SLOW_ADD};
use crate::sandbox::store::SandboxStore;
use crate::sandbox::SandboxManager;
use crate::server::instrument::RpcTraceLayer;
use crate::server::{CriService, RuntimeContext};
use crate::stream_runtime::ContainerStreams;

/// kubelet sends and accepts messages up to 16 MiB (large container lists).
const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// How long in-flight calls may run on after SIGTERM/SIGINT. A client that
/// never answers the HTTP/2 GOAWAY must not keep berthd alive forever.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    CgroupDriver(#[from] cgroup_driver::SystemdUnavailable),
    #[error(transparent)]
    Listen(#[from] listener::ListenError),
    #[error(transparent)]
    ImageStore(#[from] berth_image::store::StoreError),
    #[error(transparent)]
    RootLock(#[from] RootLockError),
    #[error(transparent)]
    Registry(#[from] berth_image::hosts::HostsError),
    #[error(transparent)]
    HelperBinary(#[from] crate::helper_binary::HelperBinaryError),
    #[error("start-up: {0}")]
    Startup(String),
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot install signal handler: {0}")]
    Signal(std::io::Error),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Checks what must hold before anything is touched: the cgroup driver is
/// resolved here, once, for the daemon's whole life (KEP-4033).
pub fn preflight(config: &Config) -> Result<Driver, DaemonError> {
    Ok(cgroup_driver::resolve(config.cgroup_driver, &RealHost)?)
}

/// Claims the root directory and opens what lives there. The socket is
/// bound first, so a second berthd on the same socket stops before it
/// touches anything, and the root lock stops one on another socket.
fn open_context(
    config: Config,
    cgroup_driver: Driver,
) -> Result<(RuntimeContext, RootLock), DaemonError> {
    let layout = RootLayout::new(&config.root_dir);
    for dir in layout
        .all()
        .into_iter()
        .chain(StateLayout::new(&config.state_dir).all())
    {
        create_dir(&dir)?;
    }
    let lock = RootLock::acquire(&config.root_dir)?;
    let store = ImageStore::open(&layout.images())?;
    let images = Arc::new(
        ImagePuller::new(Arc::new(store), registry_hosts(&config)?).with_timeouts(
            berth_image::pull::RegistryTimeouts {
                connect: Duration::from_secs(config.registry.connect_timeout_seconds),
                read: Duration::from_secs(config.registry.read_timeout_seconds),
            },
        ),
    );
    let cgroupfs = Arc::new(
        CgroupfsManager::new().map_err(|err| DaemonError::Startup(format!("cgroups: {err}")))?,
    );
    let features = HostFeatures::detect(cgroupfs.layout());
    tracing::info!(layout = ?cgroupfs.layout(), ?features, "cgroups");
    let kernel = crate::kernel_features::KernelFeatures::probe();
    let handlers = Arc::new(crate::runtime_handlers::RuntimeHandlers::from_config(
        &config,
        &kernel,
        &crate::runtime_handlers::run_features,
    ));
    let lsm = crate::lsm::probe_and_load();
    let metrics: Arc<crate::metrics::Metrics> = Arc::default();
    let sandboxes = Arc::new(open_sandboxes(
        &config,
        cgroup_driver,
        &cgroupfs,
        &kernel,
        handlers,
        lsm,
        &metrics,
    )?);
    let containers = Arc::new(ContainerManager {
        store: ContainerStore::open(&StateLayout::new(&config.state_dir).containers())
            .map_err(|err| DaemonError::Startup(format!("containers: {err}")))?,
        images: images.store().clone(),
        sandboxes: sandboxes.clone(),
        layers_dir: layout.containers(),
        shims_dir: StateLayout::new(&config.state_dir).shims(),
        shim: helper_binary(&config.helper_dir(), "berth-shim")?,
        shims: Arc::new(ShimProcesses::new()),
        mounts: Arc::new(OverlayMounts),
        // Container cgroups are read and updated as files under either
        // driver (systemd made the scope; the files are the same).
        cgroups: cgroupfs,
        layer_leases: Default::default(),
        cdi_spec_dirs: config.cdi.spec_dirs.clone(),
        criu: Arc::new(CriuBinary),
        criu_check: Default::default(),
        features: berth_spec::CgroupFeatures {
            v2: features.v2,
            hugetlb: features.hugetlb,
            swap: features.swap,
        },
        trim_mounts: own_mount(&config.state_dir),
        states: crate::container::state_cache::StateCache::for_fd_limit(),
        allow_checkpoint_images: config.allow_checkpoint_images,
        default_rlimits: config.default_rlimits(),
    });
    let streams = start_stream_server(&config, &containers, &sandboxes)?;
    let fs_usage = crate::fs_usage::FsUsageCache::new(layout.images(), layout.containers());
    let stats_period = Duration::from_secs(config.stats_collection_period);
    let context = RuntimeContext {
        config_in_force: crate::reload::ConfigInForce::new(config.clone()),
        config,
        cgroup_driver,
        images,
        sandboxes,
        containers,
        events: Arc::default(),
        exit_watcher: None,
        metrics,
        stats: Arc::new(crate::stats_sampler::StatsSampler::new(stats_period)),
        streams,
        kernel,
        fs_usage,
    };
    Ok((context, lock))
}

/// `state_dir` when it is a mount point of its own (a tmpfs, say): only then
/// can a shim drop every other pod's mounts from its view with one lazy
/// unmount (berth-shim's `mount_view`). Read once: the state dir does not
/// move while berthd runs.
fn own_mount(state_dir: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(state_dir).ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = berth_spec::host::is_mount_point_in(&mountinfo, &dir);
    tracing::info!(state = %dir.display(), own_mount = own, "state dir");
    own.then_some(dir)
}

/// The streaming server behind Exec, Attach and PortForward, serving
/// berth's containers and sandboxes.
fn start_stream_server(
    config: &Config,
    containers: &Arc<ContainerManager>,
    sandboxes: &Arc<SandboxManager>,
) -> Result<StreamServer, DaemonError> {
    let stream = &config.stream;
    let server_config = StreamServerConfig {
        address: stream.address,
        port: stream.port,
        token_ttl: Duration::from_secs(stream.token_ttl_seconds),
        idle_timeout: Duration::from_secs(stream.idle_timeout_seconds),
        stream_creation_timeout: Duration::from_secs(stream.stream_creation_timeout_seconds),
    };
    let runtime = Arc::new(ContainerStreams::new(containers.clone(), sandboxes.clone()));
    StreamServer::bind(server_config, runtime).map_err(|err| {
        DaemonError::Startup(format!(
            "streaming server on {}:{}: {err}",
            stream.address, stream.port
        ))
    })
}

/// Sandbox state from earlier runs, the cgroup manager and CNI settings.
fn open_sandboxes(
    config: &Config,
    driver: Driver,
    cgroupfs: &Arc<CgroupfsManager>,
    kernel: &crate::kernel_features::KernelFeatures,
    runtime_handlers: Arc<crate::runtime_handlers::RuntimeHandlers>,
    lsm: berth_spec::LsmHost,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Result<SandboxManager, DaemonError> {
    let startup =
        |what: &str, err: &dyn std::fmt::Display| DaemonError::Startup(format!("{what}: {err}"));
    let cgroups: Arc<dyn CgroupManager> = match driver {
        Driver::Cgroupfs => cgroupfs.clone(),
        // systemd owns the cgroups of its units: slices and scopes are made
        // and removed over D-Bus, never by mkdir/rmdir behind its back.
        Driver::Systemd => {
            let bus = DbusSystemd::connect()
                .map_err(|err| startup("the systemd cgroup driver needs systemd's D-Bus", &err))?;
            Arc::new(SystemdManager::new(Box::new(bus), cgroupfs.clone()))
        }
    };
    let parents = ParentTracker::open(
        cgroups.clone(),
        StateLayout::new(&config.state_dir).cgroup_parents(),
    )
    .map_err(|err| startup("cgroup parents", &err))?;
    let store = SandboxStore::open(&StateLayout::new(&config.state_dir).sandboxes())
        .map_err(|err| startup("sandboxes", &err))?;
    let default_parent = config
        .default_cgroup_parent
        .clone()
        .unwrap_or_else(|| driver.default_parent().to_string());
    Ok(SandboxManager {
        store,
        cgroups,
        parents,
        driver,
        default_parent,
        network: pod_networks(&config.cni, metrics),
        namespaces: Arc::new(Pinns {
            binary: helper_binary(&config.helper_dir(), "berth-pinns")?,
        }),
        ns_dir: StateLayout::new(&config.state_dir).namespaces(),
        pods_dir: RootLayout::new(&config.root_dir).pods(),
        runtime_handlers,
        cgroup_lock: std::sync::Mutex::new(()),
        user_namespaces: kernel.user_namespaces,
        lsm,
        pod_cidr: RwLock::new(None),
        unfinished: Default::default(),
    })
}

/// The CNI networks, timed for the metrics, their ADDs paced while the
/// CPUs are all busy (`[cni] adds_when_busy`, one per CPU by default).
fn pod_networks(
    config: &crate::config::CniConfig,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Arc<dyn PodNetworks> {
    let metered: Arc<dyn PodNetworks> = Arc::new(MeteredNetworks {
        inner: Arc::new(CniConfig::new(
            config.conf_dir.clone(),
            config.bin_dirs.clone(),
        )),
        metrics: metrics.clone(),
    });
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    match config.adds_when_busy.unwrap_or(cpus) {
        0 => metered,
        slots => {
            let load: Arc<dyn CpuLoad> = match CpuPressure::open() {
                Some(pressure) => Arc::new(pressure),
                None => Arc::new(RunQueue { cpus }),
            };
            Arc::new(PacedNetworks::new(metered, slots, load, SLOW_ADD))
        }
    }
}

/// A helper binary from the helper directory (`helper_dir`), behind a
/// view no container can write through (`helper_binary.rs`); berthd does
/// not start without it, naming the path it looked at.
fn helper_binary(dir: &Path, name: &str) -> Result<HelperBinary, DaemonError> {
    let path = dir.join(name);
    crate::helper_binary::check_executable(&path)?;
    let helper = HelperBinary::protect(&HostViews, &path)?;
    tracing::info!(binary = %path.display(), protection = ?helper.protection(), "helper");
    Ok(helper)
}

/// Raises berthd's soft open-file limit to its hard one: berthd holds an
/// fd per shim, pidfd and watch, and containers inherit the shim's limits
/// unless `default_ulimits` sets them.
pub fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => tracing::info!(from = soft, to = hard, "raised the open-file limit"),
            Err(err) => {
                tracing::warn!(soft, hard, error = %err, "cannot raise the open-file limit")
            }
        },
        Ok(_) => {}
        Err(err) => tracing::warn!(error = %err, "cannot read the open-file limit"),
    }
}

/// Tells systemd (Type=notify) how berthd is doing; nothing without
/// NOTIFY_SOCKET, i.e. when not run as such a unit.
fn notify(states: &[sd_notify::NotifyState]) {
    if let Err(err) = sd_notify::notify(states) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}

/// Serves CRI until SIGTERM or SIGINT; reloads the config on SIGHUP.
pub async fn run(
    config: Config,
    cgroup_driver: Driver,
    source: &ConfigSource,
    reload: crate::reload::ReloadInputs,
) -> Result<(), DaemonError> {
    // SIGHUP's default action ends the process: take it over before
    // anything else, so that an early `systemctl reload` never kills berthd.
    let mut sighup = signal(SignalKind::hangup()).map_err(DaemonError::Signal)?;
    let socket = config.listen.clone();
    let listener = listener::bind(&socket)?;
    let (mut context, _root_lock) = match open_context(config, cgroup_driver) {
        Ok(opened) => opened,
        Err(err) => {
            let _ = std::fs::remove_file(&socket);
            return Err(err);
        }
    };
    let config = &context.config;
    // Directories of containers removed just before a crash or restart.
    crate::container::trash::purge_leftovers(&[&config.root_dir, &config.state_dir]);
    // Creates a kill cut short, before anything new can start.
    crate::recovery::recover(&context.sandboxes, &context.containers).await;
    tracing::info!(
        version = crate::cli::VERSION,
        config = %source,
        listen = %socket.display(),
        stream_server = %context.streams.local_addr(),
        root = %config.root_dir.display(),
        state = %config.state_dir.display(),
        cgroup_driver = context.cgroup_driver.as_str(),
        "berthd serving"
    );

    let mut sigterm = signal(SignalKind::terminate()).map_err(DaemonError::Signal)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?;
    let stopping = Arc::new(Notify::new());
    let shutdown = {
        let stopping = stopping.clone();
        async move {
            let name = tokio::select! {
                _ = sigterm.recv() => "SIGTERM",
                _ = sigint.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutting down: finishing in-flight calls");
            notify(&[sd_notify::NotifyState::Stopping]);
            stopping.notify_one();
        }
    };

    let exits = match crate::events::ExitWatcher::start() {
        Ok((watcher, exits)) => {
            context.exit_watcher = Some(watcher);
            Some(exits)
        }
        Err(err) => {
            tracing::warn!(error = %err, "no exit watcher: containers exiting on their own send no STOPPED event");
            None
        }
    };
    let metrics_listener = if context.config.metrics.enabled {
        let address = context.config.metrics.address;
        let listener = match tokio::net::TcpListener::bind(address).await {
            Ok(listener) => listener,
            Err(err) => {
                let _ = std::fs::remove_file(&socket);
                return Err(DaemonError::Startup(format!(
                    "metrics.address {address}: {err}"
                )));
            }
        };
        tracing::info!(%address, "serving metrics at /metrics");
        Some(listener)
    } else {
        None
    };
    let metrics = context.metrics.clone();
    let mut reloader = crate::reload::Reloader::new(
        reload,
        context.images.clone(),
        context.config_in_force.clone(),
    );
    tokio::spawn(async move {
        while sighup.recv().await.is_some() {
            tracing::info!(signal = "SIGHUP", "reloading the config");
            let mut states = vec![sd_notify::NotifyState::Reloading];
            states.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
            notify(&states);
            reloader.reload();
            notify(&[sd_notify::NotifyState::Ready]);
        }
    });
    // Detached: it samples for as long as berthd runs.
    drop(
        context
            .stats
            .spawn(Arc::new(crate::stats_sampler::HostUsage {
                containers: context.containers.clone(),
            })),
    );
    let service = CriService::new(context);
    // Detached too: it follows the sampler's passes.
    drop(service.keep_metrics_warm());
    if let Some(exits) = exits {
        service.start_events(exits).await;
    }
    if let Some(listener) = metrics_listener {
        tokio::spawn(crate::metrics::serve(
            listener,
            metrics.clone(),
            crate::metrics_sampler::sampler(
                service.context().sandboxes.clone(),
                service.context().containers.clone(),
            ),
        ));
    }
    let serve = tonic::transport::Server::builder()
        .layer(RpcTraceLayer::new(Some(metrics)))
        .add_service(
            RuntimeServiceServer::new(service.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
        )
        .add_service(
            ImageServiceServer::new(service)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
        )
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown);
    // The socket is bound and the services built: calls are served from
    // here on (connections made earlier wait in the listen backlog).
    notify(&[
        sd_notify::NotifyState::MainPid(std::process::id()),
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("serving CRI"),
    ]);
    let grace_expired = async {
        stopping.notified().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let result = tokio::select! {
        result = serve => result,
        _ = grace_expired => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "in-flight calls did not finish in time; exiting");
            Ok(())
        }
    };

    if let Err(err) = std::fs::remove_file(&socket) {
        tracing::warn!(socket = %socket.display(), error = %err, "cannot remove socket");
    }
    result?;
    tracing::info!("berthd stopped");
    Ok(())
}

/// Creates `path` (and its parents) and makes it 0711, also when it
/// existed: every host user may pass through (a pod's user namespace maps
/// its root to an unprivileged host uid that must reach its own files
/// below), none may list what is there. What lies below is root's alone,
/// or open to one pod's mapped group.
fn create_dir(path: &Path) -> Result<(), DaemonError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o711)))
        .map_err(|source| DaemonError::CreateDir {
            path: path.to_path_buf(),
            source,
        })
}
