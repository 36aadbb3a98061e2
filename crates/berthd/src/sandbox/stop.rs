//! StopPodSandbox: the infra process is killed and the network detached.

use berth_network::cni::NetworkConfigList;

use super::store::{SandboxRecord, SandboxState};
use super::{SandboxError, SandboxManager};

impl SandboxManager {
    /// StopPodSandbox: the infra process is killed and the network detached.
    /// Already stopped, or unknown, is success.
    pub async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let mut record = handle.lock().await;
        // A concurrent RemovePodSandbox finished while we waited: success.
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        // The namespaces are pinned, so CNI DEL needs no live infra process:
        // the kill and its wait overlap the plugins' work.
        let kill = async {
            if let Some(infra) = &record.infra {
                self.namespaces.kill_and_wait(infra).await;
            }
        };
        let detach = async {
            if record.network_attached {
                self.detach_network(&record).await
            } else {
                Ok(())
            }
        };
        let ((), detached) = tokio::join!(kill, detach);
        detached?;
        record.network_attached = false;
        record.state = SandboxState::NotReady;
        Ok(self.store.persist(&record)?)
    }

    async fn detach_network(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        let Some(raw) = &record.network_config else {
            return Ok(());
        };
        let network =
            NetworkConfigList::from_slice(raw.as_bytes(), std::path::Path::new("(saved)"))
                .map_err(|source| SandboxError::SavedCniConfig {
                    id: record.id.clone(),
                    source: Box::new(source),
                })?;
        let netns = record.namespaces.get("net").cloned().unwrap_or_default();
        let pod = self.pod_network(&record.id, &record.config.clone(), &netns);
        self.network
            .del(&network, &pod, record.cni_result.as_ref())
            .await
            .map_err(|source| SandboxError::CniDel {
                id: record.id.clone(),
                source: Box::new(source),
            })
    }
}
