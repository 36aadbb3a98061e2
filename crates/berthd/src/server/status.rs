//! `Status`: runtime and network readiness, the handlers berth offers and
//! what they support, and with `verbose` the effective config: the one in
//! force, with what the last reload applied.

use std::collections::HashMap;
use std::path::Path;

use cri_api::v1::{
    RuntimeCondition, RuntimeFeatures, RuntimeHandler, RuntimeHandlerFeatures, RuntimeStatus,
    StatusRequest, StatusResponse,
};

use super::CriService;
use crate::kernel_features::KernelFeatures;
use crate::runtime_handlers::RuntimeHandlers;
use berth_network::cni::config_files;

/// Condition types kubelet requires (CRI constants).
pub const RUNTIME_READY: &str = "RuntimeReady";
pub const NETWORK_READY: &str = "NetworkReady";

impl CriService {
    pub(super) fn serve_status(&self, request: StatusRequest) -> StatusResponse {
        let config = &self.context().config;
        let mut info = HashMap::new();
        if request.verbose {
            info.insert(
                "config".to_string(),
                self.context()
                    .config_in_force
                    .get()
                    .to_info_json(self.context().cgroup_driver.as_str())
                    .to_string(),
            );
        }
        StatusResponse {
            status: Some(RuntimeStatus {
                conditions: vec![runtime_condition(), network_condition(&config.cni.conf_dir)],
            }),
            info,
            runtime_handlers: runtime_handlers(&self.context().sandboxes.runtime_handlers),
            features: runtime_features(&self.context().kernel),
        }
    }
}

/// What berth supports beyond the handlers' features. Each turns on in the
/// change that makes it work, and only where it works.
fn runtime_features(kernel: &KernelFeatures) -> Option<RuntimeFeatures> {
    Some(RuntimeFeatures {
        // berth-spec applies Merge and Strict group policies.
        supplemental_groups_policy: true,
        // KEP-5607: a user namespace on the host's network binds the host's
        // /sys recursively read-only, so it needs user namespaces and
        // mount_setattr (kubelet then declares UserNamespacesHostNetworkSupport
        // when its gate is on).
        user_namespaces_host_network: kernel.user_namespaces && kernel.recursive_read_only,
        // berth-spec applies noexec, nodev and nosuid to binds.
        mount_options: true,
    })
}

/// The daemon answers, so the runtime is ready.
fn runtime_condition() -> RuntimeCondition {
    RuntimeCondition {
        r#type: RUNTIME_READY.to_string(),
        status: true,
        reason: "RuntimeIsReady".to_string(),
        message: "berth is serving CRI v1".to_string(),
    }
}

/// The network is ready once a CNI config exists to set pods up with.
fn network_condition(conf_dir: &Path) -> RuntimeCondition {
    let (status, reason, message) = match config_files(conf_dir) {
        Ok(files) if !files.is_empty() => (
            true,
            "NetworkIsReady".to_string(),
            format!("CNI config {} is in use", files[0].display()),
        ),
        Ok(_) => (
            false,
            "NetworkPluginNotReady".to_string(),
            format!("no CNI network config found in {}", conf_dir.display()),
        ),
        Err(err) => (
            false,
            "NetworkPluginNotReady".to_string(),
            format!("cannot read CNI config dir {}: {err}", conf_dir.display()),
        ),
    };
    RuntimeCondition {
        r#type: NETWORK_READY.to_string(),
        status,
        reason,
        message,
    }
}

/// The handlers `RunPodSandbox` accepts. The empty name is the default
/// handler, which kubelet uses when a pod names no RuntimeClass.
/// Recursive read-only mounts are advertised only where the kernel makes
/// them (Linux 5.12) and the handler's runtime does, as kubelet then sends
/// them; user namespaces likewise (kubelet refuses `hostUsers: false` pods
/// otherwise). See `crate::runtime_handlers`.
fn runtime_handlers(handlers: &RuntimeHandlers) -> Vec<RuntimeHandler> {
    handlers
        .all()
        .map(|handler| RuntimeHandler {
            name: handler.name.clone(),
            features: Some(RuntimeHandlerFeatures {
                recursive_read_only_mounts: handler.features.recursive_read_only_mounts,
                user_namespaces: handler.features.user_namespaces,
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_is_ready_only_with_a_config() {
        let dir = tempfile::tempdir().unwrap();
        let condition = network_condition(dir.path());
        assert!(!condition.status);
        assert_eq!(condition.r#type, NETWORK_READY);
        assert!(condition
            .message
            .contains(&dir.path().display().to_string()));

        std::fs::write(dir.path().join("10-net.conflist"), "{}").unwrap();
        let condition = network_condition(dir.path());
        assert!(condition.status);
        assert!(condition.message.contains("10-net.conflist"));
    }

    #[test]
    fn every_handler_reports_its_own_features() {
        let kernel = KernelFeatures {
            recursive_read_only: false,
            user_namespaces: true,
        };
        let handlers = RuntimeHandlers::default_only("/run/b/runtime".into(), &kernel).with(
            crate::runtime_handlers::RuntimeHandler {
                name: "runc".into(),
                binary: Some("/usr/sbin/runc".into()),
                root: "/run/b/runtimes/runc".into(),
                own_root: true,
                features: Default::default(),
                sandbox_image: None,
            },
        );
        let handlers = runtime_handlers(&handlers);
        let names: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["", "runc"]);
        let default = handlers[0].features.as_ref().unwrap();
        assert!(!default.recursive_read_only_mounts);
        assert!(default.user_namespaces);
        let runc = handlers[1].features.as_ref().unwrap();
        assert!(!runc.recursive_read_only_mounts && !runc.user_namespaces);
    }

    #[test]
    fn user_namespaces_on_the_hosts_network_only_where_user_namespaces_work() {
        for (user_namespaces, recursive_read_only) in
            [(false, false), (false, true), (true, false), (true, true)]
        {
            let kernel = KernelFeatures {
                recursive_read_only,
                user_namespaces,
            };
            let features = runtime_features(&kernel).unwrap();
            assert_eq!(
                features.user_namespaces_host_network,
                user_namespaces && recursive_read_only
            );
            assert!(features.supplemental_groups_policy && features.mount_options);
        }
    }

    #[test]
    fn conditions_carry_reasons() {
        let condition = runtime_condition();
        assert!(condition.status);
        assert!(!condition.reason.is_empty() && !condition.message.is_empty());
    }
}
