//! What the runtime tells a plugin: the pod's identity (`CNI_ARGS`) and the
//! plugin's stdin (its configuration with `name`, `cniVersion`, `prevResult`
//! and `runtimeConfig` injected, as libcni does).

use std::path::PathBuf;

use serde_json::{json, Map, Value};

use super::config::{NetworkConfigList, PluginConfig};

/// The interface name kubelet's runtimes give the pod's network interface.
pub const DEFAULT_IFNAME: &str = "eth0";

/// One host port published by the pod (CRI `PortMapping`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortMapping {
    /// The port on the host. Mappings with `host_port <= 0` only document a
    /// container port and are not passed to plugins.
    pub host_port: i32,
    /// The port in the pod.
    pub container_port: i32,
    /// `tcp`, `udp` or `sctp`, lowercase.
    pub protocol: String,
    /// The host address to bind, empty for all.
    pub host_ip: String,
}

/// Everything the CNI client needs to know about one pod sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodNetwork {
    /// The sandbox id (`CNI_CONTAINERID`, `K8S_POD_INFRA_CONTAINER_ID`).
    pub sandbox_id: String,
    /// The pinned network namespace (`CNI_NETNS`).
    pub netns: PathBuf,
    /// The interface to create in the namespace (`CNI_IFNAME`), usually `eth0`.
    pub ifname: String,
    /// The pod's Kubernetes namespace.
    pub pod_namespace: String,
    /// The pod's name.
    pub pod_name: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// Host ports to publish (the `portMappings` capability).
    pub port_mappings: Vec<PortMapping>,
    /// The node's pod CIDR, if kubelet sent one (the `ipRanges` capability).
    pub pod_cidr: Option<String>,
}

/// The `CNI_ARGS` value for a pod, in the form kubelet's runtimes use.
///
/// `IgnoreUnknown=1` comes first so plugins that do not know the `K8S_*`
/// keys accept them.
pub fn cni_args(pod: &PodNetwork) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
        pod.pod_namespace, pod.pod_name, pod.sandbox_id, pod.pod_uid
    )
}

/// The `runtimeConfig` for one plugin: only the capabilities it declares.
///
/// - `portMappings`: the pod's mappings with a host port, as
///   `{hostPort, containerPort, protocol, hostIP}` (`hostIP` omitted when
///   empty). Left out when there are none, as containerd does; `portmap`
///   rejects a host port of 0.
/// - `ipRanges`: `[[{"subnet": pod_cidr}]]` when a pod CIDR is known.
pub fn runtime_config(plugin: &PluginConfig, pod: &PodNetwork) -> Map<String, Value> {
    let mut config = Map::new();
    if plugin.has_capability("portMappings") {
        let mappings: Vec<Value> = pod
            .port_mappings
            .iter()
            .filter(|m| m.host_port > 0)
            .map(|m| {
                let mut entry = Map::new();
                entry.insert("hostPort".into(), json!(m.host_port));
                entry.insert("containerPort".into(), json!(m.container_port));
                entry.insert("protocol".into(), json!(m.protocol.to_ascii_lowercase()));
                if !m.host_ip.is_empty() {
                    entry.insert("hostIP".into(), json!(m.host_ip));
                }
                Value::Object(entry)
            })
            .collect();
        if !mappings.is_empty() {
            config.insert("portMappings".into(), Value::Array(mappings));
        }
    }
    if plugin.has_capability("ipRanges") {
        if let Some(cidr) = pod.pod_cidr.as_deref().filter(|c| !c.is_empty()) {
            config.insert("ipRanges".into(), json!([[{ "subnet": cidr }]]));
        }
    }
    config
}

/// The JSON a plugin reads on stdin.
///
/// The plugin's own configuration, with the list's `name` and `cniVersion`,
/// `prevResult` when given, and `runtimeConfig` when non-empty (replacing any
/// in the file, as libcni does).
pub fn plugin_stdin(
    list: &NetworkConfigList,
    plugin: &PluginConfig,
    prev_result: Option<&Value>,
    runtime_config: Map<String, Value>,
) -> Value {
    let mut config = plugin.config.clone();
    config.insert("name".into(), Value::String(list.name.clone()));
    config.insert("cniVersion".into(), Value::String(list.cni_version.clone()));
    if let Some(prev) = prev_result {
        config.insert("prevResult".into(), prev.clone());
    }
    if !runtime_config.is_empty() {
        config.insert("runtimeConfig".into(), Value::Object(runtime_config));
    }
    Value::Object(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn list(json: &str) -> NetworkConfigList {
        NetworkConfigList::from_slice(json.as_bytes(), Path::new("t.conflist")).unwrap()
    }

    fn pod() -> PodNetwork {
        PodNetwork {
            sandbox_id: "sb1".into(),
            netns: "/run/berth/ns/sb1/net".into(),
            ifname: DEFAULT_IFNAME.into(),
            pod_namespace: "default".into(),
            pod_name: "web".into(),
            pod_uid: "uid-1".into(),
            port_mappings: vec![
                PortMapping {
                    host_port: 8080,
                    container_port: 80,
                    protocol: "TCP".into(),
                    host_ip: String::new(),
                },
                PortMapping {
                    host_port: 0,
                    container_port: 9090,
                    protocol: "tcp".into(),
                    host_ip: String::new(),
                },
                PortMapping {
                    host_port: 5353,
                    container_port: 53,
                    protocol: "udp".into(),
                    host_ip: "127.0.0.1".into(),
                },
            ],
            pod_cidr: Some("10.244.1.0/24".into()),
        }
    }

    #[test]
    fn cni_args_carry_the_pod_identity() {
        assert_eq!(
            cni_args(&pod()),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;\
             K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=uid-1"
        );
    }

    #[test]
    fn runtime_config_only_holds_declared_capabilities() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"bridge"},
                {"type":"portmap","capabilities":{"portMappings":true,"ipRanges":false}},
                {"type":"host-local","capabilities":{"ipRanges":true}}]}"#,
        );
        assert!(runtime_config(&l.plugins[0], &pod()).is_empty());

        let ports = runtime_config(&l.plugins[1], &pod());
        assert_eq!(
            Value::Object(ports),
            json!({"portMappings": [
                {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"}
            ]})
        );

        let ranges = runtime_config(&l.plugins[2], &pod());
        assert_eq!(
            Value::Object(ranges),
            json!({"ipRanges": [[{"subnet": "10.244.1.0/24"}]]})
        );
    }

    #[test]
    fn runtime_config_omits_empty_capabilities() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"x","capabilities":{"portMappings":true,"ipRanges":true}}]}"#,
        );
        let bare = PodNetwork {
            port_mappings: vec![PortMapping {
                host_port: 0,
                container_port: 80,
                protocol: "tcp".into(),
                host_ip: String::new(),
            }],
            ..PodNetwork::default()
        };
        assert!(runtime_config(&l.plugins[0], &bare).is_empty());
    }

    #[test]
    fn plugin_stdin_injects_name_version_prev_result_and_runtime_config() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"pods","plugins":[
                {"type":"portmap","name":"ignored","cniVersion":"0.3.1",
                 "runtimeConfig":{"stale":true},"capabilities":{"portMappings":true}}]}"#,
        );
        let prev = json!({"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]});
        let rc = runtime_config(&l.plugins[0], &pod());
        let stdin = plugin_stdin(&l, &l.plugins[0], Some(&prev), rc);
        assert_eq!(stdin["name"], "pods");
        assert_eq!(stdin["cniVersion"], "1.0.0");
        assert_eq!(stdin["type"], "portmap");
        assert_eq!(stdin["prevResult"], prev);
        assert_eq!(stdin["runtimeConfig"]["portMappings"][0]["hostPort"], 8080);
        assert!(stdin["runtimeConfig"].get("stale").is_none());

        let first = plugin_stdin(&l, &l.plugins[0], None, Map::new());
        assert!(first.get("prevResult").is_none());
        assert_eq!(first["runtimeConfig"], json!({"stale": true}));
    }
}
