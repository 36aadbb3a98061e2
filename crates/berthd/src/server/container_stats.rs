//! `ContainerStats`, and the conversions from cgroup readings to CRI usage messages that pod
//! stats share.

use berth_cgroups::stats::{CgroupStats, MemoryStats, Pressure, PsiLine};
use cri_api::v1::{
    ContainerAttributes, ContainerStats, ContainerStatsRequest, ContainerStatsResponse, CpuUsage,
    FilesystemIdentifier, FilesystemUsage, IoUsage, MemoryUsage, PsiData, PsiStats, SwapUsage,
    UInt64Value,
};
use tonic::Status;

use super::CriService;
use crate::cgroup_reading::Reading;
use crate::clock::now_nanos;
use crate::container::store::ContainerRecord;
use crate::disk_usage::DiskUsage;
use crate::proc_counts::ProcessCounts;
use crate::usage_reading::{self, ContainerReading};

/// How many containers or pods the list calls (stats, metrics) read at
/// once. Each reading is a few small blocking reads (cgroup files, the
/// writable layer, the pod's netns counters) handed to a blocking thread:
/// one after another, 500 pods took 200 ms of mostly hand-offs. Bounded, so
/// a large node does not fill the blocking pool.
pub(super) const READS_AT_ONCE: usize = 8;

/// One container's stats, and what they were made from.
pub(super) struct ContainerUsage {
    pub stats: ContainerStats,
    /// Its cgroup's reading (a pod's usage adds these up) and process
    /// counts: metrics carry more of them than CRI stats have fields for.
    pub sample: CgroupSample,
}

/// What a reading is for: metrics also count the processes' open files,
/// which walks `/proc/<pid>/fd` of each, so CRI stats (which kubelet asks
/// for far more often) leave that out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadFor {
    Stats,
    Metrics,
}

/// A reading of a cgroup (or of a pod's cgroups, summed) with what only
/// metrics carry: block IO, cpu split and throttling, memory counters,
/// settings, and the processes' open files.
#[derive(Debug, Clone, Default)]
pub(super) struct CgroupSample {
    /// When it was read, in nanoseconds since the epoch.
    pub at: i64,
    pub cgroup: Option<CgroupStats>,
    pub processes: Option<ProcessCounts>,
    /// When the container was created (nanoseconds); 0 for a pod.
    pub created_at: i64,
}

/// A reading as CRI usage messages.
#[derive(Default)]
pub(super) struct UsageMessages {
    pub cpu: Option<CpuUsage>,
    pub memory: Option<MemoryUsage>,
    pub swap: Option<SwapUsage>,
    pub io: Option<IoUsage>,
}

impl CriService {
    pub(super) async fn serve_container_stats(
        &self,
        request: ContainerStatsRequest,
    ) -> Result<ContainerStatsResponse, Status> {
        super::require("container_id", &request.container_id)?;
        let record = self.context().containers.published(&request.container_id)?;
        Ok(ContainerStatsResponse {
            stats: Some(self.container_stats(&record).await),
        })
    }

    /// The stats of one container: its cgroup (absent once it is gone) and
    /// its writable layer.
    pub(super) async fn container_stats(&self, record: &ContainerRecord) -> ContainerStats {
        self.container_usage(record, ReadFor::Stats).await.stats
    }

    /// [`Self::container_stats`], with what its cgroup read and, for
    /// metrics, what its processes hold open: from the stats sampler's
    /// last pass, else (sampling off, a container newer than the pass, a
    /// stale pass) read now.
    pub(super) async fn container_usage(
        &self,
        record: &ContainerRecord,
        read_for: ReadFor,
    ) -> ContainerUsage {
        let context = self.context();
        let (reading, nano_cores) = match context.stats.container(&record.id, now_nanos()) {
            Some(sample) => (sample.reading.clone(), sample.nano_cores),
            None => {
                let with_processes = read_for == ReadFor::Metrics;
                let reading =
                    usage_reading::container(&context.containers, record, with_processes).await;
                let rate = self.live_rate(&record.id, &reading.cgroup);
                (reading, rate)
            }
        };
        let ContainerReading {
            cgroup: reading,
            processes,
            layer,
            layer_at,
        } = reading;
        // Only what the answer carries: the whole config (env, mounts,
        // security context) cloned per container per call was most of a
        // list's allocations.
        let config = &record.config;
        let usage = usage_messages(&reading, nano_cores);
        let stats = ContainerStats {
            attributes: Some(ContainerAttributes {
                id: record.id.clone(),
                metadata: config.metadata.clone(),
                labels: config.labels.clone(),
                annotations: config.annotations.clone(),
            }),
            cpu: usage.cpu,
            memory: usage.memory,
            writable_layer: layer.map(|usage| {
                writable_layer(
                    usage,
                    layer_at,
                    &context.containers.layers_dir.display().to_string(),
                )
            }),
            swap: usage.swap,
            io: usage.io,
        };
        ContainerUsage {
            stats,
            sample: CgroupSample {
                at: reading.at,
                cgroup: reading.stats,
                processes,
                created_at: record.created_at,
            },
        }
    }

    /// The cpu rate of a reading taken now, from `id`'s reading before.
    pub(super) fn live_rate(&self, id: &str, reading: &Reading) -> Option<u64> {
        self.context().stats.rate(id, reading)
    }
}

/// CPU, memory, swap and IO messages for a reading of a cgroup, with its
/// cpu rate if known.
pub(super) fn usage_messages(reading: &Reading, nano_cores: Option<u64>) -> UsageMessages {
    let Some(stats) = &reading.stats else {
        return UsageMessages::default();
    };
    let pressure = stats.pressure.unwrap_or_default();
    let cpu = stats.cpu.map(|cpu| CpuUsage {
        psi: pressure.cpu.map(psi_stats),
        ..cpu_usage(reading.at, cpu.usage_ns, nano_cores)
    });
    let memory = stats.memory.map(|memory| MemoryUsage {
        psi: pressure.memory.map(psi_stats),
        ..memory_usage(reading.at, &memory)
    });
    let swap = stats
        .memory
        .and_then(|memory| swap_usage(reading.at, &memory));
    // IoUsage holds only pressure in CRI: no pressure, no message.
    let io = pressure.io.map(|io| IoUsage {
        timestamp: reading.at,
        psi: Some(psi_stats(io)),
    });
    UsageMessages {
        cpu,
        memory,
        swap,
        io,
    }
}

fn value(value: u64) -> Option<UInt64Value> {
    Some(UInt64Value { value })
}

/// CRI cpu usage: cumulative core-nanoseconds, and the rate if known.
pub(super) fn cpu_usage(at: i64, usage_ns: u64, nano_cores: Option<u64>) -> CpuUsage {
    CpuUsage {
        timestamp: at,
        usage_core_nano_seconds: value(usage_ns),
        usage_nano_cores: nano_cores.and_then(value),
        psi: None,
    }
}

/// CRI memory usage. Available bytes is the limit minus the working set,
/// and only exists under a limit (as in kubelet's cadvisor stats).
pub(super) fn memory_usage(at: i64, memory: &MemoryStats) -> MemoryUsage {
    MemoryUsage {
        timestamp: at,
        working_set_bytes: value(memory.working_set_bytes),
        available_bytes: memory
            .limit_bytes
            .and_then(|limit| value(limit.saturating_sub(memory.working_set_bytes))),
        usage_bytes: value(memory.usage_bytes),
        rss_bytes: value(memory.rss_bytes),
        page_faults: value(memory.page_faults),
        major_page_faults: value(memory.major_page_faults),
        psi: None,
    }
}

/// CRI pressure: the kernel's `some` and `full` lines, total stall time in
/// microseconds as the kernel counts it. A missing `full` line (cpu before
/// Linux 5.13) is no `Full`.
pub(super) fn psi_stats(pressure: Pressure) -> PsiStats {
    let data = |line: PsiLine| PsiData {
        total: line.total_us,
        avg10: line.avg10,
        avg60: line.avg60,
        avg300: line.avg300,
    };
    PsiStats {
        full: pressure.full.map(data),
        some: Some(data(pressure.some)),
    }
}

/// CRI swap usage, when swap is accounted.
pub(super) fn swap_usage(at: i64, memory: &MemoryStats) -> Option<SwapUsage> {
    let used = memory.swap_usage_bytes?;
    Some(SwapUsage {
        timestamp: at,
        swap_available_bytes: memory
            .swap_limit_bytes
            .and_then(|limit| value(limit.saturating_sub(used))),
        swap_usage_bytes: value(used),
    })
}

/// The writable layer's usage, on the filesystem of `mountpoint`.
fn writable_layer(usage: DiskUsage, at: i64, mountpoint: &str) -> FilesystemUsage {
    FilesystemUsage {
        timestamp: at,
        fs_id: Some(FilesystemIdentifier {
            mountpoint: mountpoint.to_string(),
        }),
        used_bytes: value(usage.bytes),
        inodes_used: value(usage.inodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(limit: Option<u64>, swap: Option<u64>) -> MemoryStats {
        MemoryStats {
            usage_bytes: 100,
            working_set_bytes: 60,
            rss_bytes: 40,
            page_faults: 7,
            major_page_faults: 1,
            limit_bytes: limit,
            swap_usage_bytes: swap,
            swap_limit_bytes: limit,
        }
    }

    #[test]
    fn available_memory_only_under_a_limit() {
        let limited = memory_usage(5, &memory(Some(100), None));
        assert_eq!(limited.available_bytes, value(40));
        assert_eq!(limited.working_set_bytes, value(60));
        assert_eq!(limited.timestamp, 5);
        assert_eq!(memory_usage(5, &memory(None, None)).available_bytes, None);
    }

    #[test]
    fn swap_only_when_accounted() {
        assert_eq!(swap_usage(1, &memory(None, None)), None);
        let swap = swap_usage(1, &memory(Some(100), Some(30))).unwrap();
        assert_eq!(swap.swap_usage_bytes, value(30));
        assert_eq!(swap.swap_available_bytes, value(70));
    }

    #[test]
    fn pressure_keeps_the_kernels_units_and_a_missing_full() {
        let line = PsiLine {
            avg10: 1.5,
            avg60: 0.5,
            avg300: 0.25,
            total_us: 1234,
        };
        let psi = psi_stats(Pressure {
            some: line,
            full: None,
        });
        assert_eq!(psi.full, None);
        let some = psi.some.unwrap();
        assert_eq!(some.total, 1234);
        assert_eq!((some.avg10, some.avg60, some.avg300), (1.5, 0.5, 0.25));
    }

    #[test]
    fn first_cpu_sample_has_no_rate() {
        let cpu = cpu_usage(9, 1234, None);
        assert_eq!(cpu.usage_core_nano_seconds, value(1234));
        assert_eq!(cpu.usage_nano_cores, None);
    }
}
