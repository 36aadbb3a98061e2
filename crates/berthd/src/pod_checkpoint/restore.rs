//! RestorePod's checks: the checkpoint and the request are checked against
//! each other before anything is made, and each container's config is
//! pointed at its archive. The pod layer (`crate::pod`) then makes the pod
//! and its containers, and undoes them on failure.

use std::collections::HashMap;
use std::path::PathBuf;

use cri_api::v1::{ContainerConfig, PodSandboxConfig};

use crate::container::ContainerManager;

use super::manifest::{self, Manifest};
use super::{real_dir, refuse_options, PodCheckpointError};

/// One RestorePod request, as the handler passes it on.
pub struct RestorePod<'a> {
    pub checkpoint_path: &'a str,
    pub config: &'a PodSandboxConfig,
    pub runtime_handler: &'a str,
    pub options: &'a HashMap<String, String>,
    pub container_configs: &'a [ContainerConfig],
}

/// The new pod and its containers, `(name, id)` in the request's order.
#[derive(Debug)]
pub struct Restored {
    pub pod_sandbox_id: String,
    pub containers: Vec<(String, String)>,
}

/// What a checked restore makes, in the request's order: each container's
/// name and config, its image the container's archive in the checkpoint.
#[derive(Debug)]
pub struct RestorePlan {
    /// The checkpoint.
    pub dir: PathBuf,
    pub containers: Vec<(String, ContainerConfig)>,
}

/// Checks the checkpoint and the request against each other, and that
/// CRIU can run, before anything is made (`crate::pod::Pods::restore`
/// makes the pod and its containers).
pub async fn prepare(
    containers: &ContainerManager,
    request: &RestorePod<'_>,
) -> Result<RestorePlan, PodCheckpointError> {
    refuse_options(request.options)?;
    let dir = real_dir("checkpoint_path", request.checkpoint_path)?;
    let names = config_names(request.container_configs)?;
    let (manifest, pod_config) = manifest::read(&dir)?;
    matches_checkpoint(&manifest, &pod_config, request, &names)?;
    let pod_name = request
        .config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    containers
        .criu_usable()
        .await
        .map_err(|reason| PodCheckpointError::CriuUnavailable {
            what: "restore",
            pod: pod_name,
            reason,
        })?;
    let mut planned = Vec::with_capacity(names.len());
    for (config, name) in request.container_configs.iter().zip(&names) {
        let Some(entry) = manifest.containers.iter().find(|c| &c.name == name) else {
            continue; // matches_checkpoint found every name
        };
        let mut config = config.clone();
        // The archive as the image: CreateContainer's restore (the
        // container is made from the image the checkpoint names).
        let archive = dir.join(&entry.archive);
        if let Some(image) = config.image.as_mut() {
            image.image = archive.to_string_lossy().into_owned();
        }
        planned.push((name.clone(), config));
    }
    Ok(RestorePlan {
        dir,
        containers: planned,
    })
}

/// The configs' names: each set, each once.
fn config_names(configs: &[ContainerConfig]) -> Result<Vec<String>, PodCheckpointError> {
    if configs.is_empty() {
        return Err(PodCheckpointError::Invalid {
            field: "container_configs".into(),
            reason: "must hold a config for every container of the checkpoint".into(),
        });
    }
    let mut names: Vec<String> = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let invalid = |reason: &str| PodCheckpointError::Invalid {
            field: format!("container_configs[{i}].metadata.name"),
            reason: reason.to_string(),
        };
        if name.is_empty() {
            return Err(invalid("is required"));
        }
        if names.contains(&name) {
            return Err(invalid(&format!("{name:?} is named twice")));
        }
        names.push(name);
    }
    Ok(names)
}

/// The request describes the checkpoint: the same runtime handler and
/// hostname, exactly its containers by name, and for each the same image,
/// command, arguments, working directory, environment and terminal
/// (the checkpoint owns the process; the request may not change it).
fn matches_checkpoint(
    manifest: &Manifest,
    pod_config: &PodSandboxConfig,
    request: &RestorePod<'_>,
    names: &[String],
) -> Result<(), PodCheckpointError> {
    let mismatch = |field: String, what: &str| PodCheckpointError::Invalid {
        field,
        reason: format!("does not match the checkpoint's {what}"),
    };
    if manifest.runtime_handler != request.runtime_handler {
        return Err(PodCheckpointError::Invalid {
            field: "runtime_handler".into(),
            reason: format!(
                "{:?}, but the checkpoint was made under {:?}",
                request.runtime_handler, manifest.runtime_handler
            ),
        });
    }
    if pod_config.hostname != request.config.hostname {
        return Err(mismatch("config.hostname".into(), "hostname"));
    }
    if let Some(missing) = manifest
        .containers
        .iter()
        .find(|c| !names.contains(&c.name))
    {
        return Err(PodCheckpointError::Invalid {
            field: "container_configs".into(),
            reason: format!(
                "no config for the checkpoint's container {:?}",
                missing.name
            ),
        });
    }
    for (i, (config, name)) in request.container_configs.iter().zip(names).enumerate() {
        let Some(entry) = manifest.containers.iter().find(|c| &c.name == name) else {
            return Err(PodCheckpointError::Invalid {
                field: format!("container_configs[{i}].metadata.name"),
                reason: format!("the checkpoint has no container {name:?}"),
            });
        };
        if let Some(what) = process_difference(&entry.config, config) {
            return Err(mismatch(format!("container_configs[{i}].{what}"), what));
        }
    }
    Ok(())
}

/// The first field of the process description that differs, if any.
fn process_difference(
    checkpoint: &ContainerConfig,
    request: &ContainerConfig,
) -> Option<&'static str> {
    let image = |c: &ContainerConfig| {
        c.image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default()
    };
    let envs = |c: &ContainerConfig| -> HashMap<String, Vec<u8>> {
        c.envs
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect()
    };
    if image(checkpoint) != image(request) {
        Some("image.image")
    } else if checkpoint.command != request.command {
        Some("command")
    } else if checkpoint.args != request.args {
        Some("args")
    } else if checkpoint.working_dir != request.working_dir {
        Some("working_dir")
    } else if envs(checkpoint) != envs(request) {
        Some("envs")
    } else if checkpoint.tty != request.tty {
        Some("tty")
    } else {
        None
    }
}
