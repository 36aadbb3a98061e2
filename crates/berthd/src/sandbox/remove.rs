//! RemovePodSandbox.

use super::{SandboxError, SandboxManager};

impl SandboxManager {
    /// RemovePodSandbox: stops it if needed, then removes everything it
    /// owns. Unknown is success.
    pub async fn remove(&self, id: &str) -> Result<(), SandboxError> {
        let Some(handle) = self.find(id)? else {
            return Ok(());
        };
        let full_id = handle.lock().await.id.clone();
        self.stop(&full_id).await?;
        let record = handle.lock().await;
        if !self.store.contains(&record.id) {
            return Ok(());
        }
        if let Some(shm) = &record.shm {
            self.namespaces.unmount(shm);
        }
        for pin in record.namespaces.values() {
            self.namespaces.unmount(pin);
        }
        // Pods with only host namespaces have no pins, but still the dir.
        let _ = std::fs::remove_dir(self.ns_dir.join(&record.id));
        {
            let _cgroups = self.lock_cgroups();
            self.cgroups
                .remove(&record.cgroup_path)
                .map_err(|source| SandboxError::Cgroup {
                    path: record.cgroup_path.clone(),
                    source: Box::new(source),
                })?;
            if let Err(err) = self.parents.remove_unused_parents() {
                tracing::warn!(error = %err, "removing unused cgroup parents");
            }
        }
        if let Err(err) = std::fs::remove_dir_all(&record.dir) {
            if err.kind() != std::io::ErrorKind::NotFound {
                return Err(SandboxError::io(
                    format!("sandbox dir {}", record.dir.display()),
                    err,
                ));
            }
        }
        self.store.remove(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }
}
