//! `CreateContainer`.

use cri_api::v1::{
    ContainerConfig, ContainerEventType, CreateContainerRequest, CreateContainerResponse,
};
use tonic::Status;

use super::exec_sync::check_exec_strings;
use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_create_container(
        &self,
        request: CreateContainerRequest,
    ) -> Result<CreateContainerResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        check_config(&config)?;
        check_recursive_read_only(&config, &self.context().kernel)?;
        if let Some(sandbox_config) = &request.sandbox_config {
            super::sandbox_run::check_log_directory(
                "sandbox_config.log_directory",
                &sandbox_config.log_directory,
            )?;
        }
        let container_id = self
            .context()
            .containers
            .create(&request.pod_sandbox_id, config, request.sandbox_config)
            .await?;
        if let Ok(record) = self.context().containers.get(&container_id).await {
            self.emit_container_event(
                &record.id,
                &record.sandbox_id,
                ContainerEventType::ContainerCreatedEvent,
            )
            .await;
        }
        Ok(CreateContainerResponse { container_id })
    }
}

/// What the manager relies on: the container and its image are named.
pub(super) fn check_config(config: &ContainerConfig) -> Result<(), Status> {
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    require("config.metadata.name", &metadata.name)?;
    let image = config.image.as_ref().map(|image| image.image.as_str());
    require("config.image.image", image.unwrap_or_default())?;
    // The kernel refuses to exec these; the shim's create then hung.
    let argv: Vec<&[u8]> = config
        .command
        .iter()
        .chain(&config.args)
        .map(String::as_bytes)
        .collect();
    check_exec_strings("config.command and config.args", &argv)?;
    // A name is what comes before the first `=`: it cannot hold one, nor
    // be empty (libcontainer's init cannot set such a variable, and its
    // panic saying so could fill the stderr pipe the create waits behind).
    if let Some((i, _)) = config
        .envs
        .iter()
        .enumerate()
        .find(|(_, env)| env.key.is_empty() || env.key.contains('='))
    {
        return Err(Status::invalid_argument(format!(
            "config.envs[{i}].key is not a variable name: empty, or contains '='"
        )));
    }
    // Values are bytes (any but NUL); `KEY=value` is what the kernel gets.
    let envs: Vec<Vec<u8>> = config
        .envs
        .iter()
        .map(|env| [env.key.as_bytes(), b"=", &env.value].concat())
        .collect();
    let envs: Vec<&[u8]> = envs.iter().map(Vec::as_slice).collect();
    check_exec_strings("config.envs", &envs)?;
    check_paths(config)?;
    check_image_mounts(config)
}

/// Paths end up as C strings (the shim's arguments, mount and open calls),
/// which cannot hold NUL.
fn check_paths(config: &ContainerConfig) -> Result<(), Status> {
    let refuse = |field: String| {
        Err(Status::invalid_argument(format!(
            "{field} contains a NUL byte"
        )))
    };
    for (field, path) in [
        ("config.log_path", &config.log_path),
        ("config.working_dir", &config.working_dir),
    ] {
        if path.contains('\0') {
            return refuse(field.to_string());
        }
    }
    for (i, mount) in config.mounts.iter().enumerate() {
        for (name, path) in [
            ("host_path", &mount.host_path),
            ("container_path", &mount.container_path),
        ] {
            if path.contains('\0') {
                return refuse(format!("config.mounts[{i}].{name}"));
            }
        }
    }
    for (i, device) in config.devices.iter().enumerate() {
        for (name, path) in [
            ("host_path", &device.host_path),
            ("container_path", &device.container_path),
        ] {
            if path.contains('\0') {
                return refuse(format!("config.devices[{i}].{name}"));
            }
        }
    }
    Ok(())
}

/// An image volume names its image and has no host path; a sub path
/// belongs to an image volume.
fn check_image_mounts(config: &ContainerConfig) -> Result<(), Status> {
    for (index, mount) in config.mounts.iter().enumerate() {
        match &mount.image {
            Some(image) => {
                require(&format!("config.mounts[{index}].image.image"), &image.image)?;
                if !mount.host_path.is_empty() {
                    return Err(Status::invalid_argument(format!(
                        "config.mounts[{index}]: host_path and image are exclusive"
                    )));
                }
            }
            None if !mount.image_sub_path.is_empty() => {
                return Err(Status::invalid_argument(format!(
                    "config.mounts[{index}].image_sub_path is set without an image"
                )));
            }
            None => {}
        }
    }
    Ok(())
}

/// A recursive read-only mount on a kernel without `mount_setattr` would
/// fail deep in the shim; berthd does not advertise them there, and says
/// so here.
fn check_recursive_read_only(
    config: &ContainerConfig,
    kernel: &crate::kernel_features::KernelFeatures,
) -> Result<(), Status> {
    match config.mounts.iter().find(|mount| mount.recursive_read_only) {
        Some(mount) if !kernel.recursive_read_only => Err(Status::invalid_argument(format!(
            "mount {:?}: recursive_read_only needs Linux 5.12 or later (mount_setattr), which this node lacks",
            mount.container_path
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use cri_api::v1::{ContainerMetadata, ImageSpec, KeyValue, Mount};

    use super::*;

    #[test]
    fn recursive_read_only_is_refused_only_without_kernel_support() {
        let config = ContainerConfig {
            mounts: vec![cri_api::v1::Mount {
                container_path: "/data".into(),
                host_path: "/srv".into(),
                readonly: true,
                recursive_read_only: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        let without = crate::kernel_features::KernelFeatures {
            recursive_read_only: false,
            user_namespaces: true,
        };
        let err = check_recursive_read_only(&config, &without).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("/data"), "{err:?}");
        let with = crate::kernel_features::KernelFeatures {
            recursive_read_only: true,
            user_namespaces: true,
        };
        assert!(check_recursive_read_only(&config, &with).is_ok());
    }

    /// A config with what `check_config` requires and nothing else.
    fn named_config() -> ContainerConfig {
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_environment_the_kernel_cannot_exec_is_invalid() {
        let mut config = named_config();
        assert!(check_config(&config).is_ok());
        config.envs.push(KeyValue {
            key: "K".into(),
            value: "v".repeat(128 * 1024).into(),
        });
        let err = check_config(&config).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().starts_with("config.envs"), "{err:?}");
    }

    #[test]
    fn env_names_that_are_empty_or_hold_an_equals_sign_are_refused() {
        for key in ["", "=87", "A=B"] {
            let config = ContainerConfig {
                envs: vec![
                    KeyValue {
                        key: "OK".into(),
                        value: b"1".to_vec(),
                    },
                    KeyValue {
                        key: key.into(),
                        value: b"x".to_vec(),
                    },
                ],
                ..named_config()
            };
            let err = check_config(&config).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(
                err.message().starts_with("config.envs[1].key"),
                "{key}: {err:?}"
            );
        }
    }

    #[test]
    fn paths_with_nul_are_refused_naming_the_field() {
        let config = ContainerConfig {
            log_path: "a\0b".into(),
            ..named_config()
        };
        let err = check_config(&config).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().starts_with("config.log_path"), "{err:?}");
        let config = ContainerConfig {
            mounts: vec![
                Mount {
                    host_path: "/tmp".into(),
                    container_path: "/a".into(),
                    ..Default::default()
                },
                Mount {
                    host_path: "/tmp".into(),
                    container_path: "/b\0".into(),
                    ..Default::default()
                },
            ],
            ..named_config()
        };
        let err = check_config(&config).unwrap_err();
        assert!(
            err.message().starts_with("config.mounts[1].container_path"),
            "{err:?}"
        );
        assert!(check_config(&named_config()).is_ok());
    }

    #[test]
    fn env_values_may_be_any_bytes_but_nul() {
        let mut config = ContainerConfig {
            envs: vec![KeyValue {
                key: "BIN".into(),
                value: vec![0xff, 0xfe, b'x'],
            }],
            ..named_config()
        };
        assert!(check_config(&config).is_ok());
        config.envs[0].value.push(0);
        let err = check_config(&config).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("NUL"), "{err:?}");
    }
}
