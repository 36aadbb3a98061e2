//! CheckpointPod: the pod's selected containers dumped into one
//! checkpoint (`crate::pod_checkpoint` writes it); the containers run on.

use super::Pods;
use crate::pod_checkpoint::{self, CheckpointPod, PodCheckpointError};

impl Pods {
    pub async fn checkpoint(&self, request: CheckpointPod<'_>) -> Result<(), PodCheckpointError> {
        pod_checkpoint::checkpoint(&self.containers, request).await
    }
}
