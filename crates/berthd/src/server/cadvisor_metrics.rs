//! Pod and container usage under the cadvisor
//! metric names kubelet serves on `/metrics/cadvisor` when it takes stats
//! from the runtime (KEP-2371).
//!
//! CRI metric values are unsigned integers: cpu time is in whole seconds,
//! as the metric's name says.

use std::collections::HashMap;

use cri_api::v1::{
    ContainerMetrics, ContainerStats, CpuUsage, MemoryUsage, Metric, MetricDescriptor, MetricType,
    PodSandboxMetrics, PsiData, PsiStats, UInt64Value,
};

use super::container_stats::IoSample;
use super::sandbox_stats::PodUsage;
use crate::block_devices::DeviceNames;

/// Labels of every metric: the cgroup's owner (container or pod id), its
/// name and its image; kubelet adds pod, namespace and container names.
const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

/// The metrics served: name, help, type, and the label it has on top of
/// the base ones, if any.
const DESCRIPTORS: [(&str, &str, MetricType, Option<&str>); 21] = [
    (
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        MetricType::Counter,
        None,
    ),
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_memory_rss",
        "Size of RSS in bytes.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container on this filesystem.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_fs_inodes_total",
        "Number of inodes used by the container on this filesystem.",
        MetricType::Gauge,
        None,
    ),
    (
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received.",
        MetricType::Counter,
        Some(INTERFACE),
    ),
    (
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving.",
        MetricType::Counter,
        Some(INTERFACE),
    ),
    (
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted.",
        MetricType::Counter,
        Some(INTERFACE),
    ),
    (
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting.",
        MetricType::Counter,
        Some(INTERFACE),
    ),
    (
        "container_fs_reads_bytes_total",
        "Cumulative count of bytes read.",
        MetricType::Counter,
        Some(DEVICE),
    ),
    (
        "container_fs_writes_bytes_total",
        "Cumulative count of bytes written.",
        MetricType::Counter,
        Some(DEVICE),
    ),
    (
        "container_fs_reads_total",
        "Cumulative count of reads completed.",
        MetricType::Counter,
        Some(DEVICE),
    ),
    (
        "container_fs_writes_total",
        "Cumulative count of writes completed.",
        MetricType::Counter,
        Some(DEVICE),
    ),
    (
        "container_pressure_cpu_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to CPU congestion.",
        MetricType::Counter,
        None,
    ),
    (
        "container_pressure_cpu_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to CPU congestion.",
        MetricType::Counter,
        None,
    ),
    (
        "container_pressure_memory_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to memory congestion.",
        MetricType::Counter,
        None,
    ),
    (
        "container_pressure_memory_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to memory congestion.",
        MetricType::Counter,
        None,
    ),
    (
        "container_pressure_io_stalled_seconds_total",
        "Total time duration no tasks in the container could make progress due to IO congestion.",
        MetricType::Counter,
        None,
    ),
    (
        "container_pressure_io_waiting_seconds_total",
        "Total time duration tasks in the container have waited due to IO congestion.",
        MetricType::Counter,
        None,
    ),
];

/// The extra label of network metrics: the pod's interface.
const INTERFACE: &str = "interface";
/// The extra label of block IO metrics: the device's `/dev` path.
const DEVICE: &str = "device";

/// The descriptors of every metric served.
pub fn descriptors() -> Vec<MetricDescriptor> {
    DESCRIPTORS
        .iter()
        .map(|(name, help, _, extra)| {
            let mut label_keys: Vec<String> =
                BASE_LABELS.iter().map(|key| key.to_string()).collect();
            label_keys.extend(extra.map(str::to_string));
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
    /// One metric; `extra` is the value of its descriptor's extra label.
    fn push(&mut self, name: &str, timestamp: i64, value: Option<u64>, extra: Option<&str>) {
        let Some(value) = value else {
            return;
        };
        let mut label_values: Vec<String> =
            self.labels.iter().map(|label| label.to_string()).collect();
        label_values.extend(extra.map(str::to_string));
        self.metrics.push(Metric {
            name: name.to_string(),
            timestamp,
            metric_type: metric_type(name) as i32,
            label_values,
            value: Some(UInt64Value { value }),
        });
    }

    /// Several metrics with one timestamp and extra label value.
    fn push_each<const N: usize>(
        &mut self,
        timestamp: i64,
        extra: Option<&str>,
        metrics: [(&str, Option<u64>); N],
    ) {
        for (name, value) in metrics {
            self.push(name, timestamp, value, extra);
        }
    }

    /// Cpu time in whole seconds, and cpu pressure.
    fn cpu(&mut self, cpu: &CpuUsage) {
        let seconds = get(&cpu.usage_core_nano_seconds).map(|ns| ns / 1_000_000_000);
        self.push(
            "container_cpu_usage_seconds_total",
            cpu.timestamp,
            seconds,
            None,
        );
        self.pressure("cpu", cpu.timestamp, cpu.psi.as_ref());
    }

    /// Memory usage, working set and RSS, and memory pressure.
    fn memory(&mut self, memory: &MemoryUsage) {
        let at = memory.timestamp;
        self.push_each(
            at,
            None,
            [
                ("container_memory_usage_bytes", get(&memory.usage_bytes)),
                (
                    "container_memory_working_set_bytes",
                    get(&memory.working_set_bytes),
                ),
                ("container_memory_rss", get(&memory.rss_bytes)),
            ],
        );
        self.pressure("memory", at, memory.psi.as_ref());
    }

    /// cadvisor's pressure counters for `resource`: `full` is stalled,
    /// `some` is waiting; whole seconds of the kernel's microseconds.
    fn pressure(&mut self, resource: &str, at: i64, psi: Option<&PsiStats>) {
        let Some(psi) = psi else {
            return;
        };
        let seconds = |data: &Option<PsiData>| data.as_ref().map(|data| data.total / 1_000_000);
        self.push(
            &format!("container_pressure_{resource}_stalled_seconds_total"),
            at,
            seconds(&psi.full),
            None,
        );
        self.push(
            &format!("container_pressure_{resource}_waiting_seconds_total"),
            at,
            seconds(&psi.some),
            None,
        );
    }

    /// Bytes and operations per block device, labelled with its name.
    fn block_io(&mut self, sample: Option<&IoSample>, devices: &DeviceNames) {
        let Some(IoSample { at, io }) = sample else {
            return;
        };
        let at = *at;
        for device in &io.devices {
            let name = devices
                .get(&(device.major, device.minor))
                .cloned()
                .unwrap_or_else(|| format!("{}:{}", device.major, device.minor));
            self.push_each(
                at,
                Some(&name),
                [
                    ("container_fs_reads_bytes_total", Some(device.read_bytes)),
                    ("container_fs_writes_bytes_total", Some(device.write_bytes)),
                    ("container_fs_reads_total", Some(device.reads)),
                    ("container_fs_writes_total", Some(device.writes)),
                ],
            );
        }
    }
}

fn get(value: &Option<UInt64Value>) -> Option<u64> {
    value.as_ref().map(|value| value.value)
}

/// Pod usage as metrics: the pod's cpu, memory, pressure, block IO and
/// network, then each container's cpu, memory, pressure, block IO and
/// writable layer.
pub fn pod_metrics(
    usage: &PodUsage,
    images: &HashMap<String, String>,
    devices: &DeviceNames,
) -> PodSandboxMetrics {
    let stats = &usage.stats;
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
        pod.cpu(cpu);
    }
    if let Some(memory) = &linux.memory {
        pod.memory(memory);
    }
    if let Some(io) = &linux.io {
        pod.pressure("io", io.timestamp, io.psi.as_ref());
    }
    pod.block_io(usage.io.as_ref(), devices);
    if let Some(network) = &linux.network {
        for iface in &network.interfaces {
            pod.push_each(
                network.timestamp,
                Some(&iface.name),
                [
                    (
                        "container_network_receive_bytes_total",
                        get(&iface.rx_bytes),
                    ),
                    (
                        "container_network_receive_errors_total",
                        get(&iface.rx_errors),
                    ),
                    (
                        "container_network_transmit_bytes_total",
                        get(&iface.tx_bytes),
                    ),
                    (
                        "container_network_transmit_errors_total",
                        get(&iface.tx_errors),
                    ),
                ],
            );
        }
    }
    PodSandboxMetrics {
        pod_sandbox_id: attributes.id.clone(),
        metrics: pod.metrics,
        container_metrics: linux
            .containers
            .iter()
            .map(|container| {
                let id = container.attributes.as_ref().map(|a| a.id.as_str());
                let io = id.and_then(|id| usage.container_io.get(id));
                container_metrics(container, io, images, devices)
            })
            .collect(),
    }
}

fn container_metrics(
    stats: &ContainerStats,
    io: Option<&IoSample>,
    images: &HashMap<String, String>,
    devices: &DeviceNames,
) -> ContainerMetrics {
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
        builder.cpu(cpu);
    }
    builder.block_io(io, devices);
    if let Some(memory) = &stats.memory {
        builder.memory(memory);
        let limit = get(&memory.available_bytes)
            .zip(get(&memory.working_set_bytes))
            .map(|(available, working_set)| available + working_set);
        builder.push(
            "container_spec_memory_limit_bytes",
            memory.timestamp,
            limit,
            None,
        );
    }
    if let Some(io) = &stats.io {
        builder.pressure("io", io.timestamp, io.psi.as_ref());
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
    use berth_cgroups::stats::block_io::parse_io_stat;
    use cri_api::v1::{
        ContainerAttributes, ContainerMetadata, IoUsage, LinuxPodSandboxStats,
        NetworkInterfaceUsage, NetworkUsage, PodSandboxAttributes, PodSandboxStats,
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
                        psi: Some(psi(2_500_000, None)),
                        ..Default::default()
                    }),
                    io: Some(IoUsage {
                        timestamp: 1,
                        psi: Some(psi(7_000_000, Some(3_000_000))),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            windows: None,
        };
        let images = HashMap::from([("c1".to_string(), "busybox".to_string())]);
        let sample = |text: &str| IoSample {
            at: 1,
            io: parse_io_stat(text),
        };
        let usage = PodUsage {
            stats,
            io: Some(sample(
                "254:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:0 rbytes=1\n",
            )),
            container_io: HashMap::from([("c1".to_string(), sample("254:0 wbytes=5\n"))]),
        };
        let devices = DeviceNames::from([((254, 0), "/dev/vda".to_string())]);
        let metrics = pod_metrics(&usage, &images, &devices);
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

        let find = |metrics: &[Metric], name: &str, device: Option<&str>| {
            metrics
                .iter()
                .find(|m| m.name == name && device.is_none_or(|d| m.label_values[3] == d))
                .map(|m| get(&m.value))
        };
        // Devices are named where sysfs knows them, else by number.
        assert_eq!(
            find(
                &metrics.metrics,
                "container_fs_writes_bytes_total",
                Some("/dev/vda")
            ),
            Some(Some(20))
        );
        assert_eq!(
            find(
                &metrics.metrics,
                "container_fs_reads_bytes_total",
                Some("8:0")
            ),
            Some(Some(1))
        );
        let container = &metrics.container_metrics[0].metrics;
        assert_eq!(
            find(
                container,
                "container_fs_writes_bytes_total",
                Some("/dev/vda")
            ),
            Some(Some(5))
        );
        // Pressure in whole seconds: some is waiting, full is stalled, and
        // a missing full line is no stalled metric.
        assert_eq!(
            find(
                container,
                "container_pressure_cpu_waiting_seconds_total",
                None
            ),
            Some(Some(2))
        );
        assert_eq!(
            find(
                container,
                "container_pressure_cpu_stalled_seconds_total",
                None
            ),
            None
        );
        assert_eq!(
            find(
                container,
                "container_pressure_io_stalled_seconds_total",
                None
            ),
            Some(Some(3))
        );
        assert_eq!(
            find(
                &metrics.metrics,
                "container_pressure_cpu_waiting_seconds_total",
                None
            ),
            None,
            "the pod had no pressure"
        );
    }

    fn psi(some_us: u64, full_us: Option<u64>) -> PsiStats {
        let data = |total| PsiData {
            total,
            ..Default::default()
        };
        PsiStats {
            some: Some(data(some_us)),
            full: full_us.map(data),
        }
    }
}
