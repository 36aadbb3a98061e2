//! RemoveContainer.

use std::time::Duration;

use berth_shim_api::protocol::{Request, Response};

use super::rootfs::RootfsPaths;
use super::store::ContainerRecord;
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
        let shutdown = self
            .shims
            .call(&record.shim_dir, Request::Shutdown, Duration::ZERO)
            .await;
        if !matches!(shutdown, Ok(Response::Ok)) {
            self.delete_without_shim(&record).await?;
        }
        let detached = self
            .mounts
            .unmount(&RootfsPaths::new(&record.layer_dir, &record.bundle))?;
        // Releasing the overlay syncs the disk its upper dir is on; the
        // container is gone from its path already, nothing waits for that.
        tokio::task::spawn_blocking(move || drop(detached));
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
        self.states.forget(&record.shim_dir);
        self.release_layers(&record.id);
        self.store.release_name(&record.name_key, &record.id);
        Ok(())
    }

    /// What the shim's delete would have removed, for a container whose
    /// shim is gone or refused: the shim if it still runs, the cgroup
    /// (killed first; under systemd its scope) and its runtime's state,
    /// in its handler's state root. A handler no longer configured leaves
    /// that root unknown: the container is kept, the error names it.
    async fn delete_without_shim(&self, record: &ContainerRecord) -> Result<(), ContainerError> {
        let handler = self
            .sandboxes
            .runtime_handlers
            .get(&record.runtime_handler)
            .ok_or_else(|| ContainerError::UnknownRuntimeHandler {
                what: format!("container {}", record.id),
                handler: record.runtime_handler.clone(),
                action: "remove it",
            })?;
        self.shims.kill_unrecorded(&record.shim_dir).await;
        self.kill_cgroup(record).await?;
        self.on_cgroup(record, "removing a cgroup", |cgroups, path| {
            cgroups.remove(path)
        })
        .await?;
        handler
            .remove_state(&record.id)
            .await
            .map_err(|err| ContainerError::io("removing the container's runtime state", err))
    }
}
