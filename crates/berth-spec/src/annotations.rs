//! OCI annotations of a container, and where its CRI log goes.
//!
//! Annotations are the config's own, plus a few `io.kubernetes.cri.*`
//! keys with the names containerd uses, so tools that read them from a
//! container's `config.json` (NRI plugins, debugging scripts) work on
//! berth too. Labels are not an OCI concept: they stay in berthd's
//! metadata, where ListContainers filters on them.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use cri_api::v1::{ContainerConfig, PodSandboxConfig};

use crate::error::SpecError;

/// `"sandbox"` for a pod's sandbox container, whose id is the pod's (as
/// containerd's; only a handler with `sandbox_container` makes one, see
/// berthd's runtime handlers), `"container"` for every other.
pub const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
/// The sandbox's id.
pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
/// The pod's name, namespace and uid.
pub const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
pub const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
pub const SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
/// The container's name in the pod spec.
pub const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
/// The image as the container config names it.
pub const IMAGE_NAME: &str = "io.kubernetes.cri.image-name";

/// The spec's annotations: the config's, then berth's `io.kubernetes.cri.*`
/// keys, which win (a config cannot pretend to be another sandbox's).
pub fn container_annotations(
    container_id: &str,
    sandbox_id: &str,
    config: &ContainerConfig,
    sandbox_config: &PodSandboxConfig,
) -> HashMap<String, String> {
    let mut annotations = config.annotations.clone();
    let pod = sandbox_config.metadata.clone().unwrap_or_default();
    let name = config
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let image = config
        .image
        .as_ref()
        .map(|i| i.image.clone())
        .unwrap_or_default();
    for (key, value) in [
        (
            CONTAINER_TYPE,
            container_type(container_id, sandbox_id).to_string(),
        ),
        (SANDBOX_ID, sandbox_id.to_string()),
        (SANDBOX_NAME, pod.name),
        (SANDBOX_NAMESPACE, pod.namespace),
        (SANDBOX_UID, pod.uid),
        (CONTAINER_NAME, name),
        (IMAGE_NAME, image),
    ] {
        annotations.insert(key.to_string(), value);
    }
    annotations
}

/// A pod's sandbox container has the pod's id; any other is a container.
pub fn container_type(container_id: &str, sandbox_id: &str) -> &'static str {
    if container_id == sandbox_id {
        "sandbox"
    } else {
        "container"
    }
}

/// The host path of the container's CRI log: the config's `log_path`
/// inside the sandbox's `log_directory`; `None` when either is empty (no
/// log). The path must be relative and must not climb out of the
/// directory (`../other-pod/x.log`): kubelet never sends such a path, and
/// berth would otherwise write wherever a client asks.
pub fn log_path(
    config: &ContainerConfig,
    sandbox_config: &PodSandboxConfig,
) -> Result<Option<PathBuf>, SpecError> {
    if config.log_path.is_empty() || sandbox_config.log_directory.is_empty() {
        return Ok(None);
    }
    let relative = Path::new(&config.log_path);
    let mut depth = 0usize;
    for component in relative.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            _ => return Err(SpecError::LogPath(config.log_path.clone())),
        }
    }
    if depth == 0 {
        return Err(SpecError::LogPath(config.log_path.clone()));
    }
    Ok(Some(
        Path::new(&sandbox_config.log_directory).join(relative),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1::{ContainerMetadata, ImageSpec, PodSandboxMetadata};

    fn config() -> ContainerConfig {
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "app".into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: "busybox:1.29".into(),
                ..Default::default()
            }),
            annotations: [
                ("team".to_string(), "web".to_string()),
                (SANDBOX_ID.to_string(), "forged".to_string()),
            ]
            .into(),
            ..Default::default()
        }
    }

    fn sandbox() -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "web-0".into(),
                uid: "u-1".into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: "/var/log/pods/default_web-0_u-1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn annotations_carry_the_config_and_the_cri_keys() {
        let annotations = container_annotations("c-1", "s-1", &config(), &sandbox());
        assert_eq!(annotations["team"], "web");
        assert_eq!(annotations[CONTAINER_TYPE], "container");
        assert_eq!(annotations[SANDBOX_ID], "s-1");
        assert_eq!(annotations[SANDBOX_NAME], "web-0");
        assert_eq!(annotations[SANDBOX_NAMESPACE], "default");
        assert_eq!(annotations[SANDBOX_UID], "u-1");
        assert_eq!(annotations[CONTAINER_NAME], "app");
        assert_eq!(annotations[IMAGE_NAME], "busybox:1.29");
    }

    #[test]
    fn the_container_with_the_pods_id_is_its_sandbox() {
        let annotations = container_annotations("s-1", "s-1", &config(), &sandbox());
        assert_eq!(annotations[CONTAINER_TYPE], "sandbox");
        assert_eq!(annotations[SANDBOX_ID], "s-1");
        // A config cannot make itself the sandbox.
        let mut config = config();
        config
            .annotations
            .insert(CONTAINER_TYPE.to_string(), "sandbox".to_string());
        let annotations = container_annotations("c-1", "s-1", &config, &sandbox());
        assert_eq!(annotations[CONTAINER_TYPE], "container");
    }

    #[test]
    fn log_path_joins_the_log_directory() {
        let mut config = config();
        config.log_path = "app/0.log".into();
        let path = log_path(&config, &sandbox()).unwrap();
        assert_eq!(
            path,
            Some(PathBuf::from("/var/log/pods/default_web-0_u-1/app/0.log"))
        );
        config.log_path = "./a/../app.log".into();
        assert!(log_path(&config, &sandbox()).unwrap().is_some());
    }

    #[test]
    fn no_log_path_or_directory_means_no_log() {
        assert_eq!(log_path(&config(), &sandbox()).unwrap(), None);
        let mut config = config();
        config.log_path = "app.log".into();
        assert_eq!(
            log_path(&config, &PodSandboxConfig::default()).unwrap(),
            None
        );
    }

    #[test]
    fn escaping_log_paths_are_refused() {
        for bad in [
            "/etc/passwd",
            "../other/0.log",
            "a/../../x.log",
            ".",
            "a/..",
        ] {
            let mut config = config();
            config.log_path = bad.into();
            assert!(
                matches!(log_path(&config, &sandbox()), Err(SpecError::LogPath(_))),
                "{bad}"
            );
        }
    }
}
