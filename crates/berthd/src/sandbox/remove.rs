//! RemovePodSandbox.

use super::teardown::Scope;
use super::{SandboxError, SandboxManager};

impl SandboxManager {
    /// RemovePodSandbox: stops it if needed, then tears down everything it
    /// owns; the record goes last, so a removal cut short is finished by
    /// the next. Unknown is success. Runs whose undo failed are retried
    /// here first: kubelet never removes a pod it got no id for.
    pub async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        self.finish_unfinished_runs().await;
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let full_id = handle.lock().await.id.clone();
        self.stop(&full_id).await?;
        let record = handle.lock().await;
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        let mut journal = self.journal_of(&record)?;
        self.tear_down(&mut journal, Scope::All).await?;
        self.store.remove(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }
}
