//! Pod and container usage under the cadvisor metric names, label sets
//! and units kubelet serves on `/metrics/cadvisor` when it takes stats from
//! the runtime (KEP-2371), as cri-tools' metrics specs expect them.
//!
//! CRI metric values are unsigned integers: times are in whole seconds, as
//! the metrics' names say. A value berth cannot read on this node (a
//! controller not enabled, a kernel too old) is left out rather than
//! reported as zero.

use std::collections::HashMap;

use berth_cgroups::stats::{CgroupStats, IoStats};
use cri_api::v1::{
    ContainerMetrics, ContainerStats, LinuxPodSandboxStats, Metric, MetricDescriptor, MetricType,
    PodSandboxMetrics, PsiData, PsiStats, UInt64Value,
};

use super::container_stats::CgroupSample;
use super::sandbox_stats::{NetSample, PodUsage};
use crate::block_devices::DeviceNames;
use crate::fs_capacity::FsCapacity;

/// Labels of every metric: the cgroup's owner (container or pod id), its
/// name and its image; kubelet adds pod, namespace and container names.
const BASE_LABELS: [&str; 3] = ["id", "name", "image"];

const NONE: &[&str] = &[];
/// Network metrics: the pod's interface.
const INTERFACE: &[&str] = &["interface"];
/// Filesystem and block IO metrics: the device's `/dev` path.
const DEVICE: &[&str] = &["device"];
const CPU: &[&str] = &["cpu"];
const BLKIO: &[&str] = &["device", "major", "minor", "operation"];
const FAILURES: &[&str] = &["failure_type", "scope"];
const ULIMIT: &[&str] = &["ulimit"];

use MetricType::{Counter, Gauge};

/// The metrics served: name, help (cadvisor's), type, and the labels on
/// top of the base ones.
const DESCRIPTORS: &[(&str, &str, MetricType, &[&str])] = &[
    ("container_blkio_device_usage_total", "Blkio Device bytes usage", Counter, BLKIO),
    ("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", Counter, NONE),
    ("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", Counter, NONE),
    ("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.", Counter, NONE),
    ("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.", Counter, NONE),
    ("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", Counter, CPU),
    ("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.", Counter, NONE),
    ("container_file_descriptors", "Number of open file descriptors for the container.", Gauge, NONE),
    ("container_fs_inodes_free", "Number of available Inodes", Gauge, DEVICE),
    ("container_fs_inodes_total", "Number of Inodes", Gauge, DEVICE),
    ("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", Gauge, DEVICE),
    ("container_fs_reads_bytes_total", "Cumulative count of bytes read", Counter, DEVICE),
    ("container_fs_reads_total", "Cumulative count of reads completed", Counter, DEVICE),
    ("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", Gauge, DEVICE),
    ("container_fs_writes_bytes_total", "Cumulative count of bytes written", Counter, DEVICE),
    ("container_fs_writes_total", "Cumulative count of writes completed", Counter, DEVICE),
    (LAST_SEEN, "Last time a container was seen by the exporter", Gauge, NONE),
    ("container_memory_cache", "Number of bytes of page cache memory.", Gauge, NONE),
    ("container_memory_failcnt", "Number of memory usage hits limits", Counter, NONE),
    ("container_memory_failures_total", "Cumulative count of memory allocation failures.", Counter, FAILURES),
    ("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", Gauge, NONE),
    ("container_memory_mapped_file", "Size of memory mapped files in bytes.", Gauge, NONE),
    ("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", Gauge, NONE),
    ("container_memory_rss", "Size of RSS in bytes.", Gauge, NONE),
    ("container_memory_swap", "Container swap usage in bytes.", Gauge, NONE),
    ("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed", Gauge, NONE),
    ("container_memory_working_set_bytes", "Current working set in bytes.", Gauge, NONE),
    ("container_network_receive_bytes_total", "Cumulative count of bytes received", Counter, INTERFACE),
    ("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", Counter, INTERFACE),
    ("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving", Counter, INTERFACE),
    ("container_network_receive_packets_total", "Cumulative count of packets received", Counter, INTERFACE),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", Counter, INTERFACE),
    ("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", Counter, INTERFACE),
    ("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting", Counter, INTERFACE),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", Counter, INTERFACE),
    ("container_oom_events_total", "Count of out of memory events observed for the container", Counter, NONE),
    ("container_pressure_cpu_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to CPU congestion.", Counter, NONE),
    ("container_pressure_cpu_waiting_seconds_total", "Total time duration tasks in the container have waited due to CPU congestion.", Counter, NONE),
    ("container_pressure_io_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to IO congestion.", Counter, NONE),
    ("container_pressure_io_waiting_seconds_total", "Total time duration tasks in the container have waited due to IO congestion.", Counter, NONE),
    ("container_pressure_memory_stalled_seconds_total", "Total time duration no tasks in the container could make progress due to memory congestion.", Counter, NONE),
    ("container_pressure_memory_waiting_seconds_total", "Total time duration tasks in the container have waited due to memory congestion.", Counter, NONE),
    ("container_processes", "Number of processes running inside the container.", Gauge, NONE),
    ("container_sockets", "Number of open sockets for the container.", Gauge, NONE),
    ("container_spec_cpu_period", "CPU period of the container.", Gauge, NONE),
    ("container_spec_cpu_quota", "CPU quota of the container.", Gauge, NONE),
    ("container_spec_cpu_shares", "CPU share of the container.", Gauge, NONE),
    ("container_spec_memory_limit_bytes", "Memory limit for the container.", Gauge, NONE),
    ("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.", Gauge, NONE),
    ("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.", Gauge, NONE),
    ("container_start_time_seconds", "Start time of the container since unix epoch in seconds.", Gauge, NONE),
    ("container_threads", "Number of threads running inside the container", Gauge, NONE),
    ("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero", Gauge, NONE),
    ("container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", Gauge, ULIMIT),
];

/// The metric each container's list starts with: the time of the answer,
/// which a kept answer rewrites per call (`super::metrics_cache`).
pub(super) const LAST_SEEN: &str = "container_last_seen";
pub(super) const NANOS: u64 = 1_000_000_000;

/// The descriptors of every metric served.
pub fn descriptors() -> Vec<MetricDescriptor> {
    DESCRIPTORS
        .iter()
        .map(|(name, help, _, extra)| MetricDescriptor {
            name: name.to_string(),
            help: help.to_string(),
            label_keys: BASE_LABELS
                .iter()
                .chain(extra.iter())
                .map(|key| key.to_string())
                .collect(),
        })
        .collect()
}

/// A metric's type, from the table. Looked up once per metric served (tens
/// of thousands on a full node): the table is in name order, so a binary
/// search rather than a scan.
fn metric_type(name: &str) -> MetricType {
    DESCRIPTORS
        .binary_search_by(|(known, ..)| (*known).cmp(name))
        .map_or(MetricType::Gauge, |at| DESCRIPTORS[at].2)
}

/// What every pod's metrics share: the containers' images, block device
/// names, the filesystem of the writable layers, and the time now.
pub(super) struct MetricsContext<'a> {
    pub images: &'a HashMap<String, String>,
    pub devices: &'a DeviceNames,
    /// The filesystem holding the containers' writable layers.
    pub layers_fs: Option<FsCapacity>,
    /// Now, in nanoseconds since the epoch.
    pub now: i64,
}

impl MetricsContext<'_> {
    /// A device's `/dev` path, or `major:minor` where sysfs has no name.
    fn device_name(&self, major: u64, minor: u64) -> String {
        self.devices
            .get(&(major, minor))
            .cloned()
            .unwrap_or_else(|| format!("{major}:{minor}"))
    }
}

/// Adds metrics to one owner's list, labelled with the owner's base labels.
struct Builder<'a> {
    labels: [&'a str; 3],
    metrics: Vec<Metric>,
}

impl Builder<'_> {
    /// One metric; `extra` are the values of its descriptor's extra labels.
    fn push(&mut self, name: &str, timestamp: i64, value: Option<u64>, extra: &[&str]) {
        let Some(value) = value else {
            return;
        };
        self.metrics.push(Metric {
            name: name.to_string(),
            timestamp,
            metric_type: metric_type(name) as i32,
            label_values: self
                .labels
                .iter()
                .chain(extra.iter())
                .map(|label| label.to_string())
                .collect(),
            value: Some(UInt64Value { value }),
        });
    }

    /// Several metrics with one timestamp and no extra labels.
    fn push_each(&mut self, timestamp: i64, metrics: &[(&str, Option<u64>)]) {
        for (name, value) in metrics {
            self.push(name, timestamp, *value, &[]);
        }
    }

    /// Cpu time in whole seconds: in total (cadvisor's `cpu="total"`, as
    /// berth reads no per-cpu split), user and system.
    fn cpu(&mut self, at: i64, stats: &CgroupStats) {
        let seconds = stats.cpu.map(|cpu| cpu.usage_ns / NANOS);
        self.push("container_cpu_usage_seconds_total", at, seconds, &["total"]);
        let split = stats.cpu_split;
        self.push_each(
            at,
            &[
                (
                    "container_cpu_user_seconds_total",
                    split.map(|split| split.user_ns / NANOS),
                ),
                (
                    "container_cpu_system_seconds_total",
                    split.map(|split| split.system_ns / NANOS),
                ),
            ],
        );
    }

    /// Memory usage, working set, RSS and swap, and the counters the pod's
    /// summed reading has too.
    fn memory(&mut self, at: i64, stats: &CgroupStats) {
        let Some(memory) = stats.memory else {
            return;
        };
        self.push_each(
            at,
            &[
                ("container_memory_usage_bytes", Some(memory.usage_bytes)),
                (
                    "container_memory_working_set_bytes",
                    Some(memory.working_set_bytes),
                ),
                ("container_memory_rss", Some(memory.rss_bytes)),
                ("container_memory_swap", memory.swap_usage_bytes),
            ],
        );
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
            &[],
        );
        self.push(
            &format!("container_pressure_{resource}_waiting_seconds_total"),
            at,
            seconds(&psi.some),
            &[],
        );
    }

    /// Bytes and operations per block device, labelled with its name; the
    /// bytes also per operation, as cadvisor's blkio metric has them.
    fn block_io(&mut self, at: i64, io: Option<&IoStats>, context: &MetricsContext) {
        let Some(io) = io else {
            return;
        };
        for device in &io.devices {
            let name = context.device_name(device.major, device.minor);
            let counters = [
                ("container_fs_reads_bytes_total", device.read_bytes),
                ("container_fs_writes_bytes_total", device.write_bytes),
                ("container_fs_reads_total", device.reads),
                ("container_fs_writes_total", device.writes),
            ];
            for (metric, value) in counters {
                self.push(metric, at, Some(value), &[&name]);
            }
            let (major, minor) = (device.major.to_string(), device.minor.to_string());
            for (operation, value) in [("Read", device.read_bytes), ("Write", device.write_bytes)] {
                self.push(
                    "container_blkio_device_usage_total",
                    at,
                    Some(value),
                    &[&name, &major, &minor, operation],
                );
            }
        }
    }

    /// The pod's interfaces' counters.
    fn network(&mut self, net: &NetSample) {
        for iface in &net.counters.interfaces {
            let counters = [
                ("container_network_receive_bytes_total", iface.rx_bytes),
                ("container_network_receive_packets_total", iface.rx_packets),
                ("container_network_receive_errors_total", iface.rx_errors),
                (
                    "container_network_receive_packets_dropped_total",
                    iface.rx_dropped,
                ),
                ("container_network_transmit_bytes_total", iface.tx_bytes),
                ("container_network_transmit_packets_total", iface.tx_packets),
                ("container_network_transmit_errors_total", iface.tx_errors),
                (
                    "container_network_transmit_packets_dropped_total",
                    iface.tx_dropped,
                ),
            ];
            for (metric, value) in counters {
                self.push(metric, net.at, Some(value), &[&iface.name]);
            }
        }
    }

    /// What only a container's own cgroup has: throttling, memory counters,
    /// settings (cadvisor's spec metrics) and thread counts.
    fn container_cgroup(&mut self, at: i64, stats: &CgroupStats) {
        let limits = stats.cpu_limits;
        // As cadvisor: throttling only under a quota, where it is counted.
        if let (Some(throttling), Some(_)) = (stats.throttling, limits.and_then(|l| l.quota_us)) {
            self.push_each(
                at,
                &[
                    ("container_cpu_cfs_periods_total", Some(throttling.periods)),
                    (
                        "container_cpu_cfs_throttled_periods_total",
                        Some(throttling.throttled_periods),
                    ),
                    (
                        "container_cpu_cfs_throttled_seconds_total",
                        Some(throttling.throttled_ns / NANOS),
                    ),
                ],
            );
        }
        if let Some(limits) = limits {
            self.push_each(
                at,
                &[
                    ("container_spec_cpu_period", Some(limits.period_us)),
                    ("container_spec_cpu_quota", limits.quota_us),
                    ("container_spec_cpu_shares", Some(limits.shares)),
                ],
            );
        }
        if let Some(memory) = stats.memory {
            let counters = stats.memory_counters.unwrap_or_default();
            // cadvisor reports an unlimited setting as 0.
            let setting = |value: Option<u64>| Some(value.unwrap_or(0));
            self.push_each(
                at,
                &[
                    (
                        "container_spec_memory_limit_bytes",
                        setting(memory.limit_bytes),
                    ),
                    (
                        "container_spec_memory_reservation_limit_bytes",
                        setting(counters.reservation_bytes),
                    ),
                    (
                        "container_spec_memory_swap_limit_bytes",
                        setting(counters.raw_swap_limit_bytes),
                    ),
                ],
            );
        }
        if let (Some(memory), Some(counters)) = (stats.memory, stats.memory_counters) {
            self.push_each(
                at,
                &[
                    ("container_memory_cache", Some(counters.cache_bytes)),
                    (
                        "container_memory_mapped_file",
                        Some(counters.mapped_file_bytes),
                    ),
                    ("container_memory_kernel_usage", counters.kernel_bytes),
                    ("container_memory_failcnt", Some(counters.failcnt)),
                    ("container_memory_max_usage_bytes", counters.max_usage_bytes),
                    ("container_oom_events_total", counters.oom_kills),
                ],
            );
            let failures = [
                ("pgfault", "container", counters.own_page_faults),
                ("pgmajfault", "container", counters.own_major_page_faults),
                ("pgfault", "hierarchy", memory.page_faults),
                ("pgmajfault", "hierarchy", memory.major_page_faults),
            ];
            for (kind, scope, value) in failures {
                self.push(
                    "container_memory_failures_total",
                    at,
                    Some(value),
                    &[kind, scope],
                );
            }
        }
        if let Some(pids) = stats.pids {
            self.push("container_threads", at, Some(pids.current), &[]);
        }
        if let Some(max) = stats.pids_limit {
            // cadvisor: zero is no limit.
            self.push("container_threads_max", at, Some(max.unwrap_or(0)), &[]);
        }
    }
}

fn get(value: &Option<UInt64Value>) -> Option<u64> {
    value.as_ref().map(|value| value.value)
}

/// Pod usage as metrics: the pod's cgroups' cpu, memory, pressure and block
/// IO, and its network; then each container's.
pub(super) fn pod_metrics(usage: &PodUsage, context: &MetricsContext) -> PodSandboxMetrics {
    let stats = &usage.stats;
    let attributes = stats.attributes.as_ref();
    let id = attributes.map_or("", |attributes| attributes.id.as_str());
    let name = attributes
        .and_then(|attributes| attributes.metadata.as_ref())
        .map_or("", |meta| meta.name.as_str());
    let mut pod = Builder {
        labels: [id, name, ""],
        metrics: Vec::new(),
    };
    let no_linux = LinuxPodSandboxStats::default();
    let linux = stats.linux.as_ref().unwrap_or(&no_linux);
    let sample = &usage.sample;
    if let Some(cgroup) = &sample.cgroup {
        pod.cpu(sample.at, cgroup);
        pod.memory(sample.at, cgroup);
        pod.block_io(sample.at, cgroup.io.as_ref(), context);
    }
    if let Some(cpu) = &linux.cpu {
        pod.pressure("cpu", cpu.timestamp, cpu.psi.as_ref());
    }
    if let Some(memory) = &linux.memory {
        pod.pressure("memory", memory.timestamp, memory.psi.as_ref());
    }
    if let Some(io) = &linux.io {
        pod.pressure("io", io.timestamp, io.psi.as_ref());
    }
    if let Some(net) = &usage.network {
        pod.network(net);
    }
    PodSandboxMetrics {
        pod_sandbox_id: id.to_string(),
        metrics: pod.metrics,
        container_metrics: linux
            .containers
            .iter()
            .map(|container| {
                let id = container.attributes.as_ref().map(|a| a.id.as_str());
                let sample = id.and_then(|id| usage.containers.get(id));
                container_metrics(container, sample, context)
            })
            .collect(),
    }
}

fn container_metrics(
    stats: &ContainerStats,
    sample: Option<&CgroupSample>,
    context: &MetricsContext,
) -> ContainerMetrics {
    let attributes = stats.attributes.as_ref();
    let id = attributes.map_or("", |attributes| attributes.id.as_str());
    let name = attributes
        .and_then(|attributes| attributes.metadata.as_ref())
        .map_or("", |meta| meta.name.as_str());
    let image = context.images.get(id).map_or("", String::as_str);
    let mut builder = Builder {
        labels: [id, name, image],
        metrics: Vec::new(),
    };
    let now_seconds = u64::try_from(context.now).ok().map(|now| now / NANOS);
    builder.push(LAST_SEEN, context.now, now_seconds, &[]);
    if let Some(sample) = sample {
        let created = u64::try_from(sample.created_at).ok().map(|at| at / NANOS);
        builder.push("container_start_time_seconds", sample.at, created, &[]);
        if let Some(cgroup) = &sample.cgroup {
            builder.cpu(sample.at, cgroup);
            builder.memory(sample.at, cgroup);
            builder.block_io(sample.at, cgroup.io.as_ref(), context);
            builder.container_cgroup(sample.at, cgroup);
        }
        if let Some(processes) = sample.processes {
            builder.push_each(
                sample.at,
                &[
                    ("container_processes", Some(processes.processes)),
                    (
                        "container_file_descriptors",
                        Some(processes.file_descriptors),
                    ),
                    ("container_sockets", Some(processes.sockets)),
                ],
            );
            // cadvisor's -1 for unlimited has no unsigned value: left out.
            builder.push(
                "container_ulimits_soft",
                sample.at,
                processes.open_files_limit,
                &["max_open_files"],
            );
        }
    }
    if let Some(cpu) = &stats.cpu {
        builder.pressure("cpu", cpu.timestamp, cpu.psi.as_ref());
    }
    if let Some(memory) = &stats.memory {
        builder.pressure("memory", memory.timestamp, memory.psi.as_ref());
    }
    if let Some(io) = &stats.io {
        builder.pressure("io", io.timestamp, io.psi.as_ref());
    }
    if let Some(layer) = &stats.writable_layer {
        let fs = context.layers_fs;
        let device = fs
            .map(|fs| context.device_name(fs.device.0, fs.device.1))
            .unwrap_or_default();
        let at = layer.timestamp;
        let device = [device.as_str()];
        builder.push(
            "container_fs_usage_bytes",
            at,
            get(&layer.used_bytes),
            &device,
        );
        builder.push(
            "container_fs_limit_bytes",
            at,
            fs.map(|fs| fs.bytes),
            &device,
        );
        builder.push(
            "container_fs_inodes_total",
            at,
            fs.map(|fs| fs.inodes),
            &device,
        );
        builder.push(
            "container_fs_inodes_free",
            at,
            fs.map(|fs| fs.inodes_free),
            &device,
        );
    }
    ContainerMetrics {
        container_id: id.to_string(),
        metrics: builder.metrics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net_stats::{InterfaceCounters, NetCounters};
    use crate::proc_counts::ProcessCounts;
    use berth_cgroups::stats::block_io::parse_io_stat;
    use berth_cgroups::stats::{
        CpuLimits, CpuSplit, CpuStats, MemoryCounters, MemoryStats, PidsStats, Throttling,
    };
    use cri_api::v1::{
        ContainerAttributes, ContainerMetadata, CpuUsage, FilesystemUsage, IoUsage,
        LinuxPodSandboxStats, PodSandboxAttributes, PodSandboxStats,
    };

    const GIB: u64 = 1 << 30;

    fn value(value: u64) -> Option<UInt64Value> {
        Some(UInt64Value { value })
    }

    fn container_cgroup() -> CgroupStats {
        CgroupStats {
            cpu: Some(CpuStats {
                usage_ns: 1_000_000_000,
            }),
            memory: Some(MemoryStats {
                usage_bytes: 100,
                working_set_bytes: 60,
                rss_bytes: 40,
                page_faults: 7,
                major_page_faults: 1,
                limit_bytes: Some(64 << 20),
                swap_usage_bytes: Some(0),
                swap_limit_bytes: Some(0),
            }),
            pids: Some(PidsStats { current: 3 }),
            io: Some(parse_io_stat("254:0 wbytes=5\n")),
            pressure: None,
            cpu_split: Some(CpuSplit {
                user_ns: 700_000_000,
                system_ns: 2_300_000_000,
            }),
            throttling: Some(Throttling {
                periods: 10,
                throttled_periods: 4,
                throttled_ns: 1_500_000_000,
            }),
            cpu_limits: Some(CpuLimits {
                period_us: 100_000,
                quota_us: Some(20_000),
                shares: 1024,
            }),
            memory_counters: Some(MemoryCounters {
                cache_bytes: 20,
                kernel_bytes: Some(30),
                max_usage_bytes: Some(120),
                failcnt: 2,
                oom_kills: Some(1),
                own_page_faults: 5,
                raw_swap_limit_bytes: Some(128 << 20),
                ..Default::default()
            }),
            pids_limit: Some(None),
        }
    }

    fn usage() -> PodUsage {
        let stats = PodSandboxStats {
            attributes: Some(PodSandboxAttributes {
                id: "pod1".into(),
                ..Default::default()
            }),
            linux: Some(LinuxPodSandboxStats {
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
                        psi: Some(psi(2_500_000, None)),
                        ..Default::default()
                    }),
                    io: Some(IoUsage {
                        timestamp: 1,
                        psi: Some(psi(7_000_000, Some(3_000_000))),
                    }),
                    writable_layer: Some(FilesystemUsage {
                        timestamp: 1,
                        used_bytes: value(4096),
                        inodes_used: value(3),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            windows: None,
        };
        let pod_cgroup = CgroupStats {
            cpu: Some(CpuStats {
                usage_ns: 3_500_000_000,
            }),
            io: Some(parse_io_stat(
                "254:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:0 rbytes=1\n",
            )),
            ..Default::default()
        };
        PodUsage {
            stats,
            sample: CgroupSample {
                at: 1,
                cgroup: Some(pod_cgroup),
                ..Default::default()
            },
            network: Some(NetSample {
                at: 1,
                counters: NetCounters {
                    interfaces: vec![InterfaceCounters {
                        name: "eth0".into(),
                        rx_bytes: 10,
                        rx_packets: 2,
                        tx_dropped: 1,
                        ..Default::default()
                    }],
                    default_interface: None,
                },
            }),
            containers: HashMap::from([(
                "c1".to_string(),
                CgroupSample {
                    at: 1,
                    cgroup: Some(container_cgroup()),
                    processes: Some(ProcessCounts {
                        processes: 2,
                        file_descriptors: 9,
                        sockets: 1,
                        open_files_limit: Some(1024),
                    }),
                    created_at: 1_700_000_000_900_000_000,
                },
            )]),
        }
    }

    fn metrics() -> PodSandboxMetrics {
        let images = HashMap::from([("c1".to_string(), "busybox".to_string())]);
        let devices = DeviceNames::from([((254, 0), "/dev/vda".to_string())]);
        let context = MetricsContext {
            images: &images,
            devices: &devices,
            layers_fs: Some(FsCapacity {
                device: (254, 0),
                bytes: 10 * GIB,
                inodes: 1000,
                inodes_free: 400,
            }),
            now: 1_800_000_000_500_000_000,
        };
        pod_metrics(&usage(), &context)
    }

    /// The value of `name` whose extra labels are `extra`, among `metrics`.
    fn find(metrics: &[Metric], name: &str, extra: &[&str]) -> Option<u64> {
        metrics
            .iter()
            .find(|m| m.name == name && m.label_values[3..] == *extra)
            .map(|m| get(&m.value).unwrap())
    }

    #[test]
    fn every_metric_matches_a_descriptor_and_its_labels() {
        let metrics = metrics();
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
            // The table's type for the name, as the binary search finds it.
            let kind = DESCRIPTORS
                .iter()
                .find(|(name, ..)| *name == metric.name)
                .map(|(_, _, kind, _)| *kind);
            assert_eq!(Some(metric.metric_type), kind.map(|kind| kind as i32));
        }
        let mut names: Vec<_> = descriptors.iter().map(|d| &d.name).collect();
        assert!(
            names.is_sorted(),
            "the table in name order, as metric_type searches it"
        );
        names.dedup();
        assert_eq!(names.len(), descriptors.len(), "no name twice");
        assert!(descriptors.iter().all(|d| !d.help.is_empty()));
    }

    #[test]
    fn every_descriptor_has_a_value_in_a_full_reading() {
        let metrics = metrics();
        let all: Vec<&Metric> = metrics
            .metrics
            .iter()
            .chain(metrics.container_metrics.iter().flat_map(|c| &c.metrics))
            .collect();
        // Pressure only comes with cgroup v2; the fixture has no memory
        // pressure and no `full` cpu line.
        let missing: Vec<_> = descriptors()
            .into_iter()
            .map(|d| d.name)
            .filter(|name| !all.iter().any(|m| m.name == *name))
            .collect();
        assert_eq!(
            missing,
            [
                "container_pressure_cpu_stalled_seconds_total",
                "container_pressure_memory_stalled_seconds_total",
                "container_pressure_memory_waiting_seconds_total",
            ]
        );
    }

    #[test]
    fn pod_metrics_are_labelled_and_in_cadvisors_units() {
        let metrics = metrics();
        let pod = &metrics.metrics;
        assert_eq!(
            find(pod, "container_cpu_usage_seconds_total", &["total"]),
            Some(3),
            "whole seconds, cpu=total"
        );
        let rx = pod
            .iter()
            .find(|m| m.name == "container_network_receive_bytes_total")
            .unwrap();
        assert_eq!(rx.label_values, ["pod1", "", "", "eth0"]);
        assert_eq!(rx.metric_type(), MetricType::Counter);
        assert_eq!(
            find(pod, "container_network_receive_packets_total", &["eth0"]),
            Some(2)
        );
        assert_eq!(
            find(
                pod,
                "container_network_transmit_packets_dropped_total",
                &["eth0"]
            ),
            Some(1)
        );
        // Devices are named where sysfs knows them, else by number.
        assert_eq!(
            find(pod, "container_fs_writes_bytes_total", &["/dev/vda"]),
            Some(20)
        );
        assert_eq!(
            find(pod, "container_fs_reads_bytes_total", &["8:0"]),
            Some(1)
        );
        assert_eq!(
            find(
                pod,
                "container_blkio_device_usage_total",
                &["/dev/vda", "254", "0", "Write"]
            ),
            Some(20)
        );
        assert_eq!(
            find(pod, "container_pressure_cpu_waiting_seconds_total", &[]),
            None,
            "the pod had no pressure"
        );
    }

    #[test]
    fn container_metrics_are_labelled_and_in_cadvisors_units() {
        let metrics = metrics();
        let container = &metrics.container_metrics[0].metrics;
        assert_eq!(container[0].label_values[..3], ["c1", "web", "busybox"]);
        let expected: &[(&str, &[&str], u64)] = &[
            ("container_cpu_user_seconds_total", &[], 0),
            ("container_cpu_system_seconds_total", &[], 2),
            ("container_cpu_cfs_periods_total", &[], 10),
            ("container_cpu_cfs_throttled_periods_total", &[], 4),
            ("container_cpu_cfs_throttled_seconds_total", &[], 1),
            ("container_spec_cpu_period", &[], 100_000),
            ("container_spec_cpu_quota", &[], 20_000),
            ("container_spec_cpu_shares", &[], 1024),
            ("container_spec_memory_limit_bytes", &[], 64 << 20),
            ("container_spec_memory_reservation_limit_bytes", &[], 0),
            ("container_spec_memory_swap_limit_bytes", &[], 128 << 20),
            ("container_memory_cache", &[], 20),
            ("container_memory_kernel_usage", &[], 30),
            ("container_memory_max_usage_bytes", &[], 120),
            ("container_memory_swap", &[], 0),
            ("container_memory_failcnt", &[], 2),
            ("container_oom_events_total", &[], 1),
            (
                "container_memory_failures_total",
                &["pgfault", "container"],
                5,
            ),
            (
                "container_memory_failures_total",
                &["pgfault", "hierarchy"],
                7,
            ),
            ("container_threads", &[], 3),
            ("container_threads_max", &[], 0),
            ("container_processes", &[], 2),
            ("container_file_descriptors", &[], 9),
            ("container_sockets", &[], 1),
            ("container_ulimits_soft", &["max_open_files"], 1024),
            ("container_start_time_seconds", &[], 1_700_000_000),
            ("container_last_seen", &[], 1_800_000_000),
            ("container_fs_usage_bytes", &["/dev/vda"], 4096),
            ("container_fs_limit_bytes", &["/dev/vda"], 10 * GIB),
            ("container_fs_inodes_total", &["/dev/vda"], 1000),
            ("container_fs_inodes_free", &["/dev/vda"], 400),
            ("container_fs_writes_bytes_total", &["/dev/vda"], 5),
            ("container_pressure_cpu_waiting_seconds_total", &[], 2),
            ("container_pressure_io_stalled_seconds_total", &[], 3),
        ];
        for (name, extra, value) in expected {
            assert_eq!(find(container, name, extra), Some(*value), "{name}");
        }
        // Unknown (no `full` cpu pressure line): no metric rather than 0.
        assert_eq!(
            find(
                container,
                "container_pressure_cpu_stalled_seconds_total",
                &[]
            ),
            None
        );
    }

    #[test]
    fn no_throttling_without_a_quota() {
        let mut usage = usage();
        let sample = usage.containers.get_mut("c1").unwrap();
        let cgroup = sample.cgroup.as_mut().unwrap();
        cgroup.cpu_limits = Some(CpuLimits {
            quota_us: None,
            ..cgroup.cpu_limits.unwrap()
        });
        let images = HashMap::new();
        let devices = DeviceNames::new();
        let context = MetricsContext {
            images: &images,
            devices: &devices,
            layers_fs: None,
            now: 0,
        };
        let metrics = pod_metrics(&usage, &context);
        let container = &metrics.container_metrics[0].metrics;
        assert_eq!(
            find(container, "container_cpu_cfs_periods_total", &[]),
            None
        );
        assert_eq!(find(container, "container_spec_cpu_quota", &[]), None);
        assert_eq!(
            find(container, "container_spec_cpu_period", &[]),
            Some(100_000)
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
