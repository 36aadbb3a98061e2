//! `RunPodSandbox`.

use cri_api::v1::{
    ContainerEventType, NamespaceMode, PodSandboxConfig, RunPodSandboxRequest,
    RunPodSandboxResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_run_pod_sandbox(
        &self,
        request: RunPodSandboxRequest,
    ) -> Result<RunPodSandboxResponse, Status> {
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        check_config(&config)?;
        let pod_sandbox_id = self.pods().run(config, &request.runtime_handler).await?;
        tracing::info!(sandbox = %pod_sandbox_id, "pod sandbox ready");
        for kind in [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
        ] {
            self.emit_sandbox_event(&pod_sandbox_id, kind).await;
        }
        Ok(RunPodSandboxResponse { pod_sandbox_id })
    }
}

/// What the manager relies on: the pod is named, and asks for no PID mode
/// only containers can have.
pub(super) fn check_config(config: &PodSandboxConfig) -> Result<(), Status> {
    let metadata = config
        .metadata
        .as_ref()
        .ok_or_else(|| Status::invalid_argument("config.metadata is required"))?;
    require("config.metadata.name", &metadata.name)?;
    require("config.metadata.namespace", &metadata.namespace)?;
    require("config.metadata.uid", &metadata.uid)?;
    for (field, value) in [
        ("config.metadata.name", &metadata.name),
        ("config.metadata.namespace", &metadata.namespace),
        ("config.metadata.uid", &metadata.uid),
    ] {
        check_cni_arg(field, value)?;
    }
    check_log_directory("config.log_directory", &config.log_directory)?;
    check_hostname(&config.hostname)?;
    if let Some(linux) = &config.linux {
        for (key, value) in &linux.sysctls {
            check_sysctl(key, value)?;
        }
    }
    let pid = config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .and_then(|context| context.namespace_options.as_ref())
        .map(|options| options.pid());
    if pid == Some(NamespaceMode::Target) {
        return Err(Status::invalid_argument(
            "namespace_options.pid TARGET is for containers, not sandboxes",
        ));
    }
    Ok(())
}

/// Container logs are written below the pod's log directory: a relative
/// one would land wherever berthd happens to run, and a NUL cannot be in
/// a path at all.
pub(super) fn check_log_directory(field: &str, dir: &str) -> Result<(), Status> {
    if dir.is_empty() {
        return Ok(());
    }
    if !dir.starts_with('/') || dir.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "{field} {dir:?} must be an absolute path"
        )));
    }
    Ok(())
}

/// The pod's name, namespace and uid reach CNI plugins in `CNI_ARGS`,
/// `K=V;K=V` in an environment variable: `;`, `=` and NUL cannot be in it.
fn check_cni_arg(field: &str, value: &str) -> Result<(), Status> {
    if value.contains([';', '=', '\0']) {
        return Err(Status::invalid_argument(format!(
            "{field} {value:?} must not contain ';', '=' or NUL"
        )));
    }
    Ok(())
}

/// The kernel's limit (`HOST_NAME_MAX`); sethostname refuses longer names.
const HOST_NAME_MAX: usize = 64;

fn check_hostname(hostname: &str) -> Result<(), Status> {
    if hostname.len() > HOST_NAME_MAX || hostname.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "config.hostname {hostname:?} must be at most {HOST_NAME_MAX} bytes without NUL"
        )));
    }
    Ok(())
}

/// Sysctls go to berth-pinns as `key=value` arguments: a NUL cannot be in
/// an argument, and an `=` in the key would move the split.
fn check_sysctl(key: &str, value: &str) -> Result<(), Status> {
    if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "config.linux.sysctls: {key:?}={value:?} is not a sysctl setting"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostnames_and_sysctls_the_kernel_or_pinns_would_refuse() {
        assert!(check_hostname("web-0").is_ok());
        assert!(check_hostname(&"h".repeat(64)).is_ok());
        assert!(check_hostname(&"h".repeat(65)).is_err());
        assert!(check_hostname("a\0b").is_err());
        assert!(check_sysctl("net.ipv4.ip_forward", "1").is_ok());
        for (key, value) in [("", "1"), ("net.a=b", "1"), ("net.a", "1\0")] {
            let err = check_sysctl(key, value).unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(err.message().contains("sysctls"), "{err:?}");
        }
        assert!(check_cni_arg("config.metadata.namespace", "kube-system").is_ok());
        let err = check_cni_arg("config.metadata.namespace", "a=b").unwrap_err();
        assert!(
            err.message().contains("config.metadata.namespace"),
            "{err:?}"
        );
        let err = check_log_directory("config.log_directory", "logs/pod").unwrap_err();
        assert!(err.message().contains("absolute"), "{err:?}");
    }
}
