//! RemoveContainer.

use super::journal::ContainerJournal;
use super::{ContainerError, ContainerManager};

impl ContainerManager {
    /// RemoveContainer: stops it, then tears down what its journal names
    /// (a container an older berthd created gets a journal made from its
    /// record). A teardown that fails keeps the container, its record and
    /// what is left in its journal: the next RemoveContainer, or the next
    /// start, finishes it. Unknown is success.
    pub async fn remove(&self, id: &str) -> Result<(), ContainerError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let full_id = handle.lock().await.id.clone();
        self.stop(&full_id, 0).await?;
        let record = handle.lock().await;
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        let mut journal = match ContainerJournal::load(&record.bundle)? {
            Some(journal) => journal,
            None => {
                // Kept from now on, as a create's: what is left of a
                // teardown that fails is what the next one reads.
                let journal = ContainerJournal::from_record(&record);
                journal.save()?;
                journal
            }
        };
        self.tear_down(&mut journal).await?;
        self.store.remove(&record.id);
        self.states.forget(&record.shim_dir);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }
}
