//! `ListPodSandboxMetrics`: every pod's usage as cadvisor metrics
//! (KEP-2371).

use std::collections::HashMap;

use cri_api::v1::{ListPodSandboxMetricsResponse, PodSandboxMetrics};
use tonic::Status;

use super::cadvisor_metrics::pod_metrics;
use super::CriService;

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
        for handle in self.context().containers.store.all() {
            let record = handle.lock().await;
            images.insert(record.id.clone(), record.image_ref.clone());
        }
        let mut pods = Vec::new();
        for handle in self.context().sandboxes.store.all() {
            let record = handle.lock().await.clone();
            let stats = self.pod_sandbox_stats(&record).await;
            pods.push(pod_metrics(&stats, &images));
        }
        pods
    }
}
