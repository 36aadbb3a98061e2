//! A `CriService` over the fakes of both managers (no root): the handlers'
//! rules tested as kubelet meets them, gRPC codes and CRI events included.

use std::sync::Arc;
use std::time::Duration;

use berth_image::pull::ImagePuller;
use berth_stream::{StreamServer, StreamServerConfig};

use super::{CriService, RuntimeContext};
use crate::config::Config;
use crate::container::lifecycle_tests::Fixture;
use crate::stats_sampler::StatsSampler;
use crate::stream_runtime::ContainerStreams;

/// The service over `f`'s managers; its streaming server on a free
/// loopback port.
pub(crate) fn service(f: &Fixture) -> CriService {
    // Off: the handlers' tests read what the fakes hold now.
    sampled_service(f, Arc::new(StatsSampler::new(Duration::ZERO)))
}

/// [`service`], its stats and metrics calls answering from `stats`.
pub(crate) fn sampled_service(f: &Fixture, stats: Arc<StatsSampler>) -> CriService {
    let config = Config::default();
    let images = Arc::new(ImagePuller::new(
        f.manager.images.clone(),
        Default::default(),
    ));
    let streams = StreamServer::bind(
        StreamServerConfig {
            address: std::net::Ipv4Addr::LOCALHOST.into(),
            port: 0,
            token_ttl: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            stream_creation_timeout: Duration::from_secs(60),
        },
        Arc::new(ContainerStreams::new(
            f.manager.clone(),
            f.pods.manager.clone(),
        )),
    )
    .expect("streaming server");
    CriService::new(RuntimeContext {
        config_in_force: crate::reload::ConfigInForce::new(config.clone()),
        config,
        cgroup_driver: berth_cgroups::Driver::Cgroupfs,
        images,
        sandboxes: f.pods.manager.clone(),
        containers: f.manager.clone(),
        events: Arc::default(),
        exit_watcher: None,
        metrics: Arc::default(),
        stats,
        streams,
        kernel: crate::kernel_features::KernelFeatures {
            recursive_read_only: true,
            user_namespaces: true,
        },
        fs_usage: crate::fs_usage::FsUsageCache::new(
            f.dir.path().join("images"),
            f.dir.path().join("root/containers"),
        ),
    })
}
