//! `ListPodSandboxMetrics`: every pod's usage as cadvisor metrics
//! (KEP-2371).

use std::collections::{HashMap, HashSet};

use cri_api::v1::{ListPodSandboxMetricsResponse, PodSandboxMetrics};
use futures_util::stream::{self, StreamExt};
use tonic::Status;

use super::cadvisor_metrics::{pod_metrics, MetricsContext};
use super::container_stats::{ReadFor, READS_AT_ONCE};
use super::CriService;
use crate::block_devices;
use crate::clock::now_nanos;
use crate::fs_capacity;

impl CriService {
    pub(super) async fn serve_list_pod_sandbox_metrics(
        &self,
    ) -> Result<ListPodSandboxMetricsResponse, Status> {
        Ok(ListPodSandboxMetricsResponse {
            pod_metrics: self.all_pod_metrics().await,
        })
    }

    pub(super) async fn all_pod_metrics(&self) -> Vec<PodSandboxMetrics> {
        let mut images = HashMap::new();
        for record in self.context().containers.store.published_all() {
            images.insert(record.id.clone(), record.image_ref.clone());
        }
        let records = self.context().sandboxes.store.published_all();
        let usages: Vec<_> = stream::iter(records)
            .map(|record| async move { self.pod_sandbox_usage(&record, ReadFor::Metrics).await })
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        let mut numbers: HashSet<(u64, u64)> = usages
            .iter()
            .flat_map(|usage| std::iter::once(&usage.sample).chain(usage.containers.values()))
            .filter_map(|sample| sample.cgroup.as_ref()?.io.as_ref())
            .flat_map(|io| io.devices.iter())
            .map(|device| (device.major, device.minor))
            .collect();
        // Each device named once per call, not once per cgroup; the
        // writable layers' filesystem measured once too.
        let layers_dir = self.context().containers.layers_dir.clone();
        let (devices, layers_fs) = tokio::task::spawn_blocking(move || {
            let layers_fs = fs_capacity::capacity(&layers_dir).ok();
            numbers.extend(layers_fs.map(|fs| fs.device));
            (block_devices::names(numbers), layers_fs)
        })
        .await
        .unwrap_or_default();
        let context = MetricsContext {
            images: &images,
            devices: &devices,
            layers_fs,
            now: now_nanos(),
        };
        usages
            .iter()
            .map(|usage| pod_metrics(usage, &context))
            .collect()
    }
}
