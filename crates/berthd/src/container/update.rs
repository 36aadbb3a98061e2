//! UpdateContainerResources.

use super::{resources, ContainerError, ContainerManager};

impl ContainerManager {
    /// UpdateContainerResources: applied to the container's cgroup as sent,
    /// then kept in the record so `ContainerStatus` reports what is in effect.
    pub async fn update_resources(
        &self,
        id: &str,
        resources: &cri_api::v1::LinuxContainerResources,
    ) -> Result<(), ContainerError> {
        let handle = self.handle(id)?;
        // Held across the cgroup write so two updates cannot interleave
        // their cgroup writes and their record writes differently.
        let mut record = handle.lock().await;
        let update = resources::cgroup_update(resources);
        // The driver's manager: under systemd it sets the scope's unit
        // properties too, so a daemon-reload keeps the new limits.
        let cgroups = self.sandboxes.cgroups.clone();
        let path = record.cgroup_dir().to_string();
        tokio::task::spawn_blocking(move || cgroups.update(&path, &update))
            .await
            .map_err(|source| ContainerError::Task {
                what: "update task",
                source,
            })?
            .map_err(|source| ContainerError::UpdateRefused {
                id: record.id.clone(),
                source: Box::new(source),
            })?;
        let mut config = record.config.clone();
        let linux = config.linux.get_or_insert_with(Default::default);
        let current = linux.resources.clone().unwrap_or_default();
        linux.resources = Some(resources::after_update(&current, resources));
        record.config = config;
        Ok(self.store.persist(&record)?)
    }
}
