//! `ListPodSandboxMetrics`: every pod's usage as cadvisor metrics
//! (KEP-2371).

use std::collections::{HashMap, HashSet};

use cri_api::v1::{ListPodSandboxMetricsResponse, PodSandboxMetrics};
use futures_util::stream::{self, StreamExt};
use tonic::Status;

use super::cadvisor_metrics::pod_metrics;
use super::container_stats::READS_AT_ONCE;
use super::CriService;
use crate::block_devices;

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
            .map(|record| async move { self.pod_sandbox_usage(&record).await })
            .buffered(READS_AT_ONCE)
            .collect()
            .await;
        // Each device named once per call, not once per cgroup.
        let numbers: HashSet<(u64, u64)> = usages
            .iter()
            .flat_map(|usage| usage.io.iter().chain(usage.container_io.values()))
            .flat_map(|sample| sample.io.devices.iter())
            .map(|device| (device.major, device.minor))
            .collect();
        let devices = tokio::task::spawn_blocking(move || block_devices::names(numbers))
            .await
            .unwrap_or_default();
        usages
            .iter()
            .map(|usage| pod_metrics(usage, &images, &devices))
            .collect()
    }
}
