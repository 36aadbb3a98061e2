//! Pod and container usage under the cadvisor
//! metric names kubelet serves on `/metrics/cadvisor` when it takes stats
//! from the runtime (KEP-2371).
//!
//! CRI metric values are unsigned integers: cpu time is in whole seconds,
//! as the metric's name says.

use std::collections::HashMap;

use cri_api::v1::{
    ContainerMetrics, ContainerStats, Metric, MetricDescriptor, MetricType, PodSandboxMetrics,
    PodSandboxStats, UInt64Value,
};

use super::CriService;

/// Labels of every metric: the cgroup's owner (container or pod id), its
/// name and its image; kubelet adds pod, namespace and container names.
const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

/// The metrics served: name, help, type, and whether it has an
/// `interface` label on top of the base ones.
const DESCRIPTORS: [(&str, &str, MetricType, bool); 11] = [
    (
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        MetricType::Counter,
        false,
    ),
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_memory_rss",
        "Size of RSS in bytes.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container on this filesystem.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_fs_inodes_total",
        "Number of inodes used by the container on this filesystem.",
        MetricType::Gauge,
        false,
    ),
    (
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received.",
        MetricType::Counter,
        true,
    ),
    (
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving.",
        MetricType::Counter,
        true,
    ),
    (
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted.",
        MetricType::Counter,
        true,
    ),
    (
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting.",
        MetricType::Counter,
        true,
    ),
];

impl CriService {}

/// The descriptors of every metric served.
pub fn descriptors() -> Vec<MetricDescriptor> {
    DESCRIPTORS
        .iter()
        .map(|(name, help, _, per_interface)| {
            let mut label_keys: Vec<String> =
                BASE_LABELS.iter().map(|key| key.to_string()).collect();
            if *per_interface {
                label_keys.push("interface".to_string());
            }
            MetricDescriptor {
                name: name.to_string(),
                help: help.to_string(),
                label_keys,
            }
        })
        .collect()
}

fn metric_type(name: &str) -> MetricType {
    DESCRIPTORS
        .iter()
        .find(|(known, ..)| *known == name)
        .map(|(_, _, kind, _)| *kind)
        .unwrap_or(MetricType::Gauge)
}

/// Adds metrics to one owner's list, labelled with the owner's base labels.
struct Builder<'a> {
    labels: [&'a str; 3],
    metrics: Vec<Metric>,
}

impl Builder<'_> {
    fn push(&mut self, name: &str, timestamp: i64, value: Option<u64>, interface: Option<&str>) {
        let Some(value) = value else {
            return;
        };
        let mut label_values: Vec<String> =
            self.labels.iter().map(|label| label.to_string()).collect();
        label_values.extend(interface.map(str::to_string));
        self.metrics.push(Metric {
            name: name.to_string(),
            timestamp,
            metric_type: metric_type(name) as i32,
            label_values,
            value: Some(UInt64Value { value }),
        });
    }
}

fn get(value: &Option<UInt64Value>) -> Option<u64> {
    value.as_ref().map(|value| value.value)
}

/// Pod stats as metrics: the pod's cpu, memory and network, then each
/// container's cpu, memory and writable layer.
pub fn pod_metrics(stats: &PodSandboxStats, images: &HashMap<String, String>) -> PodSandboxMetrics {
    let attributes = stats.attributes.clone().unwrap_or_default();
    let name = attributes
        .metadata
        .map(|meta| meta.name)
        .unwrap_or_default();
    let mut pod = Builder {
        labels: [&attributes.id, &name, ""],
        metrics: Vec::new(),
    };
    let linux = stats.linux.clone().unwrap_or_default();
    if let Some(cpu) = &linux.cpu {
        let seconds = get(&cpu.usage_core_nano_seconds).map(|ns| ns / 1_000_000_000);
        pod.push(
            "container_cpu_usage_seconds_total",
            cpu.timestamp,
            seconds,
            None,
        );
    }
    if let Some(memory) = &linux.memory {
        pod.push(
            "container_memory_usage_bytes",
            memory.timestamp,
            get(&memory.usage_bytes),
            None,
        );
        pod.push(
            "container_memory_working_set_bytes",
            memory.timestamp,
            get(&memory.working_set_bytes),
            None,
        );
        pod.push(
            "container_memory_rss",
            memory.timestamp,
            get(&memory.rss_bytes),
            None,
        );
    }
    if let Some(network) = &linux.network {
        for iface in &network.interfaces {
            let at = network.timestamp;
            let name = Some(iface.name.as_str());
            pod.push(
                "container_network_receive_bytes_total",
                at,
                get(&iface.rx_bytes),
                name,
            );
            pod.push(
                "container_network_receive_errors_total",
                at,
                get(&iface.rx_errors),
                name,
            );
            pod.push(
                "container_network_transmit_bytes_total",
                at,
                get(&iface.tx_bytes),
                name,
            );
            pod.push(
                "container_network_transmit_errors_total",
                at,
                get(&iface.tx_errors),
                name,
            );
        }
    }
    PodSandboxMetrics {
        pod_sandbox_id: attributes.id.clone(),
        metrics: pod.metrics,
        container_metrics: linux
            .containers
            .iter()
            .map(|container| container_metrics(container, images))
            .collect(),
    }
}

fn container_metrics(stats: &ContainerStats, images: &HashMap<String, String>) -> ContainerMetrics {
    let attributes = stats.attributes.clone().unwrap_or_default();
    let name = attributes
        .metadata
        .map(|meta| meta.name)
        .unwrap_or_default();
    let image = images.get(&attributes.id).cloned().unwrap_or_default();
    let mut builder = Builder {
        labels: [&attributes.id, &name, &image],
        metrics: Vec::new(),
    };
    if let Some(cpu) = &stats.cpu {
        let seconds = get(&cpu.usage_core_nano_seconds).map(|ns| ns / 1_000_000_000);
        builder.push(
            "container_cpu_usage_seconds_total",
            cpu.timestamp,
            seconds,
            None,
        );
    }
    if let Some(memory) = &stats.memory {
        let at = memory.timestamp;
        builder.push(
            "container_memory_usage_bytes",
            at,
            get(&memory.usage_bytes),
            None,
        );
        builder.push(
            "container_memory_working_set_bytes",
            at,
            get(&memory.working_set_bytes),
            None,
        );
        builder.push("container_memory_rss", at, get(&memory.rss_bytes), None);
        let limit = get(&memory.available_bytes)
            .zip(get(&memory.working_set_bytes))
            .map(|(available, working_set)| available + working_set);
        builder.push("container_spec_memory_limit_bytes", at, limit, None);
    }
    if let Some(layer) = &stats.writable_layer {
        builder.push(
            "container_fs_usage_bytes",
            layer.timestamp,
            get(&layer.used_bytes),
            None,
        );
        builder.push(
            "container_fs_inodes_total",
            layer.timestamp,
            get(&layer.inodes_used),
            None,
        );
    }
    ContainerMetrics {
        container_id: attributes.id.clone(),
        metrics: builder.metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1::{
        ContainerAttributes, ContainerMetadata, CpuUsage, LinuxPodSandboxStats,
        NetworkInterfaceUsage, NetworkUsage, PodSandboxAttributes,
    };

    fn value(value: u64) -> Option<UInt64Value> {
        Some(UInt64Value { value })
    }

    #[test]
    fn every_metric_matches_a_descriptor_and_its_labels() {
        let stats = PodSandboxStats {
            attributes: Some(PodSandboxAttributes {
                id: "pod1".into(),
                ..Default::default()
            }),
            linux: Some(LinuxPodSandboxStats {
                cpu: Some(CpuUsage {
                    timestamp: 1,
                    usage_core_nano_seconds: value(3_500_000_000),
                    ..Default::default()
                }),
                network: Some(NetworkUsage {
                    timestamp: 1,
                    default_interface: None,
                    interfaces: vec![NetworkInterfaceUsage {
                        name: "eth0".into(),
                        rx_bytes: value(10),
                        rx_errors: value(0),
                        tx_bytes: value(20),
                        tx_errors: value(0),
                    }],
                }),
                containers: vec![ContainerStats {
                    attributes: Some(ContainerAttributes {
                        id: "c1".into(),
                        metadata: Some(ContainerMetadata {
                            name: "web".into(),
                            attempt: 0,
                        }),
                        ..Default::default()
                    }),
                    cpu: Some(CpuUsage {
                        timestamp: 1,
                        usage_core_nano_seconds: value(1_000_000_000),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            windows: None,
        };
        let images = HashMap::from([("c1".to_string(), "busybox".to_string())]);
        let metrics = pod_metrics(&stats, &images);
        let descriptors = descriptors();
        let all = metrics.metrics.iter().chain(
            metrics
                .container_metrics
                .iter()
                .flat_map(|c| c.metrics.iter()),
        );
        for metric in all {
            let descriptor = descriptors
                .iter()
                .find(|d| d.name == metric.name)
                .unwrap_or_else(|| panic!("{} has no descriptor", metric.name));
            assert_eq!(
                metric.label_values.len(),
                descriptor.label_keys.len(),
                "{metric:?}"
            );
        }
        let cpu = &metrics.metrics[0];
        assert_eq!(
            (cpu.name.as_str(), get(&cpu.value)),
            ("container_cpu_usage_seconds_total", Some(3))
        );
        assert_eq!(cpu.metric_type(), MetricType::Counter);
        let rx = metrics
            .metrics
            .iter()
            .find(|m| m.name == "container_network_receive_bytes_total")
            .unwrap();
        assert_eq!(rx.label_values, ["pod1", "", "", "eth0"]);
        let container = &metrics.container_metrics[0].metrics[0];
        assert_eq!(container.label_values, ["c1", "web", "busybox"]);
    }
}
