//! StopPodSandbox: the infra process is killed and the network detached,
//! by the pod's teardown ([`Scope::Stop`]).

use super::store::SandboxState;
use super::teardown::Scope;
use super::{journal::PodResource, SandboxError, SandboxManager};

impl SandboxManager {
    /// StopPodSandbox: the infra process is killed and the network detached.
    /// Already stopped, or unknown, is success. The pod is NotReady from
    /// the first attempt on, also when a step fails: that step stays in
    /// the journal and the next Stop or Remove does it again.
    pub async fn stop(&self, id: &str) -> Result<(), SandboxError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let mut record = handle.lock().await;
        // A concurrent RemovePodSandbox finished while we waited: success.
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        let mut journal = self.journal_of(&record)?;
        let torn = self.tear_down(&mut journal, Scope::Stop).await;
        record.network_attached = journal
            .entries
            .iter()
            .any(|entry| matches!(entry, PodResource::Network { .. }));
        record.state = SandboxState::NotReady;
        self.store.persist(&record)?;
        torn
    }
}
