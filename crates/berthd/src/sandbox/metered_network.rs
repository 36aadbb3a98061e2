//! Times every CNI call for the metrics endpoint: ADD and DEL are most of
//! a pod's start and stop, and a slow or failing plugin is what an
//! operator needs to see first.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use berth_network::cni::{AddResult, CniError, NetworkConfigList, PodNetwork};

use super::host::PodNetworks;
use crate::metrics::Metrics;

/// A pod network whose calls are timed into `metrics`.
pub struct MeteredNetworks {
    pub inner: Arc<dyn PodNetworks>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl PodNetworks for MeteredNetworks {
    fn conf_dir(&self) -> &std::path::Path {
        self.inner.conf_dir()
    }

    async fn add(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError> {
        let started = Instant::now();
        let added = self.inner.add(network, pod).await;
        self.metrics
            .observe_cni("ADD", added.is_ok(), started.elapsed().as_secs_f64());
        added
    }

    async fn del(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
        prev_result: Option<&serde_json::Value>,
    ) -> Result<(), CniError> {
        let started = Instant::now();
        let deleted = self.inner.del(network, pod, prev_result).await;
        self.metrics
            .observe_cni("DEL", deleted.is_ok(), started.elapsed().as_secs_f64());
        deleted
    }
}
