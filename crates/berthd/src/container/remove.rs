//! RemoveContainer.

use std::time::Duration;

use berth_shim_api::protocol::Request;

use super::rootfs::RootfsPaths;
use super::{trash, ContainerError, ContainerManager};

impl ContainerManager {
    /// RemoveContainer: stops it, then removes its shim, rootfs and files.
    /// Unknown is success.
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
        let _ = self
            .shims
            .call(&record.shim_dir, Request::Shutdown, Duration::ZERO)
            .await;
        self.mounts
            .unmount(&RootfsPaths::new(&record.layer_dir, &record.bundle))?;
        let mut trashed = Vec::new();
        for dir in [&record.bundle, &record.layer_dir, &record.shim_dir] {
            match trash::discard(dir).await {
                Ok(moved) => trashed.extend(moved),
                Err(err) => {
                    trash::purge(trashed);
                    return Err(ContainerError::io(
                        format!("removing {}", dir.display()),
                        err,
                    ));
                }
            }
        }
        trash::purge(trashed);
        self.store.remove(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }
}
