//! Resource usage of a cgroup, read from its files: cpu time (user and
//! system, CFS throttling), memory (usage, working set, RSS, cache, page
//! faults, failures, peak, OOM kills, limits), swap, process count and
//! limit, block IO, pressure (PSI), and the cpu settings cadvisor reports
//! as the container's spec.
//!
//! [`v1`] and [`v2`] read one layout each from directories given to them,
//! so both are unit-tested against fixture files; [`StatsDirs`] says where
//! a cgroup's files are, and [`crate::CgroupfsManager::stats_dirs`] finds
//! them on the host.

pub mod block_io;
pub mod pressure;
pub mod v1;
pub mod v2;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

pub use block_io::{DeviceIo, IoStats};
pub use pressure::{Pressure, PressureStats, PsiLine};

/// Errors reading stats; each names the file.
#[derive(thiserror::Error, Debug)]
pub enum StatsError {
    /// The cgroup (or one of its controller files) does not exist.
    #[error("{} does not exist", file.display())]
    Missing { file: PathBuf },
    #[error("reading {}: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file did not hold what the kernel writes there.
    #[error("unexpected content {content:?} in {}", file.display())]
    Parse { file: PathBuf, content: String },
}

/// Where one cgroup's stats files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatsDirs {
    /// cgroup v1: one directory per controller (`None` when that
    /// controller is not mounted).
    V1 {
        cpuacct: Option<PathBuf>,
        /// The cpu controller: CFS throttling and settings.
        cpu: Option<PathBuf>,
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        blkio: Option<PathBuf>,
    },
    /// cgroup v2: the cgroup's one directory.
    V2 { dir: PathBuf },
}

/// One sample of a cgroup's usage. Parts whose controller is missing are
/// `None`; so is pressure on cgroup v1, which has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupStats {
    pub cpu: Option<CpuStats>,
    pub memory: Option<MemoryStats>,
    pub pids: Option<PidsStats>,
    pub io: Option<IoStats>,
    pub pressure: Option<PressureStats>,
    /// User and system cpu time.
    pub cpu_split: Option<CpuSplit>,
    /// CFS bandwidth periods and throttling; `None` without the cpu
    /// controller.
    pub throttling: Option<Throttling>,
    /// The cpu settings; `None` without the cpu controller.
    pub cpu_limits: Option<CpuLimits>,
    /// Memory counters beyond [`MemoryStats`].
    pub memory_counters: Option<MemoryCounters>,
    /// `pids.max`: `Some(None)` when unlimited.
    pub pids_limit: Option<Option<u64>>,
}

/// Cumulative cpu time split by mode, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSplit {
    pub user_ns: u64,
    pub system_ns: u64,
}

/// CFS bandwidth counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods elapsed (only counted under a quota).
    pub periods: u64,
    /// Periods in which the cgroup ran out of quota.
    pub throttled_periods: u64,
    /// Total time throttled, in nanoseconds.
    pub throttled_ns: u64,
}

/// The cpu settings of a cgroup, as cgroup v1 names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuLimits {
    /// CFS period in microseconds.
    pub period_us: u64,
    /// CFS quota in microseconds per period; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// Relative weight in v1 shares (v2's `cpu.weight` converted back).
    pub shares: u64,
}

/// Memory counters and settings cadvisor reports beyond usage and limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryCounters {
    /// Page cache (v1 `total_cache`, v2 `file`).
    pub cache_bytes: u64,
    /// Memory-mapped files.
    pub mapped_file_bytes: u64,
    /// Kernel memory charged to the cgroup; `None` where not reported.
    pub kernel_bytes: Option<u64>,
    /// How often usage hit the limit (v1 `memory.failcnt`, v2
    /// `memory.events` `max`).
    pub failcnt: u64,
    /// Peak usage; `None` where the kernel does not keep it.
    pub max_usage_bytes: Option<u64>,
    /// OOM kills in the cgroup; `None` where the kernel does not count.
    pub oom_kills: Option<u64>,
    /// Page faults of the cgroup itself, without its children (v1 only
    /// keeps these apart; v2 counts the subtree).
    pub own_page_faults: u64,
    pub own_major_page_faults: u64,
    /// The reservation (v1 soft limit, v2 `memory.min`); `None` when
    /// unset or unlimited.
    pub reservation_bytes: Option<u64>,
    /// The swap limit as the kernel holds it (v1: memory plus swap); `None`
    /// when unlimited or not accounted.
    pub raw_swap_limit_bytes: Option<u64>,
}

/// Cumulative cpu time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Cpu time used by all tasks, in nanoseconds.
    pub usage_ns: u64,
}

/// Memory and swap use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Everything charged, page cache included.
    pub usage_bytes: u64,
    /// Usage minus inactive file pages: what cannot be reclaimed easily,
    /// and what kubelet evicts on.
    pub working_set_bytes: u64,
    /// Anonymous memory.
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// The memory limit; `None` when unlimited.
    pub limit_bytes: Option<u64>,
    /// Swap in use; `None` without swap accounting.
    pub swap_usage_bytes: Option<u64>,
    /// The swap limit; `None` when unlimited or not accounted.
    pub swap_limit_bytes: Option<u64>,
}

/// Processes (tasks) in the cgroup and below.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidsStats {
    pub current: u64,
}

impl CgroupStats {
    /// Adds `other` into `self`: usage and counters add up, limits and
    /// pressure do not (they are dropped: a sum of cgroups has no limit of
    /// its own, and stall percentages of siblings cannot be added).
    pub fn accumulate(&mut self, other: &CgroupStats) {
        if let Some(cpu) = other.cpu {
            self.cpu.get_or_insert_with(CpuStats::default).usage_ns += cpu.usage_ns;
        }
        if let Some(memory) = other.memory {
            let sum = self.memory.get_or_insert_with(MemoryStats::default);
            sum.usage_bytes += memory.usage_bytes;
            sum.working_set_bytes += memory.working_set_bytes;
            sum.rss_bytes += memory.rss_bytes;
            sum.page_faults += memory.page_faults;
            sum.major_page_faults += memory.major_page_faults;
            sum.limit_bytes = None;
            sum.swap_limit_bytes = None;
            if let Some(swap) = memory.swap_usage_bytes {
                *sum.swap_usage_bytes.get_or_insert(0) += swap;
            }
        }
        if let Some(pids) = other.pids {
            self.pids.get_or_insert_with(PidsStats::default).current += pids.current;
        }
        if let Some(io) = &other.io {
            self.io.get_or_insert_with(IoStats::default).accumulate(io);
        }
        if let Some(split) = other.cpu_split {
            let sum = self.cpu_split.get_or_insert_with(CpuSplit::default);
            sum.user_ns += split.user_ns;
            sum.system_ns += split.system_ns;
        }
        self.pressure = None;
    }
}

/// Reads a cgroup's stats from `dirs`. A controller directory that is
/// absent makes that part `None`; a cgroup with no part at all is
/// [`StatsError::Missing`].
pub fn read(dirs: &StatsDirs) -> Result<CgroupStats, StatsError> {
    let stats = match dirs {
        StatsDirs::V1 {
            cpuacct,
            cpu,
            memory,
            pids,
            blkio,
        } => CgroupStats {
            cpu: optional(cpuacct.as_deref(), v1::cpu)?,
            memory: optional(memory.as_deref(), v1::memory)?,
            pids: optional(pids.as_deref(), v1::pids)?,
            io: optional(blkio.as_deref(), block_io::v1)?,
            pressure: None,
            cpu_split: optional(cpuacct.as_deref(), v1::cpu_split)?,
            throttling: optional(cpu.as_deref(), v1::throttling)?,
            cpu_limits: optional(cpu.as_deref(), v1::cpu_limits)?,
            memory_counters: optional(memory.as_deref(), v1::memory_counters)?,
            pids_limit: optional(pids.as_deref(), pids_max)?,
        },
        StatsDirs::V2 { dir } => {
            if !dir.is_dir() {
                return Err(StatsError::Missing { file: dir.clone() });
            }
            CgroupStats {
                cpu: optional(Some(dir), v2::cpu)?,
                memory: optional(Some(dir), v2::memory)?,
                pids: optional(Some(dir), v2::pids)?,
                io: optional(Some(dir), block_io::v2)?,
                pressure: pressure::read(dir),
                cpu_split: optional(Some(dir), v2::cpu_split)?,
                throttling: optional(Some(dir), v2::throttling)?,
                cpu_limits: optional(Some(dir), v2::cpu_limits)?,
                memory_counters: optional(Some(dir), v2::memory_counters)?,
                pids_limit: optional(Some(dir), pids_max)?,
            }
        }
    };
    if stats == CgroupStats::default() {
        let file = match dirs {
            StatsDirs::V1 { memory, .. } => memory.clone().unwrap_or_default(),
            StatsDirs::V2 { dir } => dir.clone(),
        };
        return Err(StatsError::Missing { file });
    }
    Ok(stats)
}

/// The pids of the processes in the cgroup itself (not its children),
/// from `cgroup.procs`: v1's pids dir (else memory's or cpuacct's), v2's
/// one dir.
pub fn procs(dirs: &StatsDirs) -> Result<Vec<u32>, StatsError> {
    let dir = match dirs {
        StatsDirs::V1 {
            pids,
            memory,
            cpuacct,
            ..
        } => pids.as_ref().or(memory.as_ref()).or(cpuacct.as_ref()),
        StatsDirs::V2 { dir } => Some(dir),
    };
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let file = dir.join("cgroup.procs");
    let text = read_file(&file)?;
    text.lines()
        .map(|line| {
            line.trim().parse().map_err(|_| StatsError::Parse {
                file: file.clone(),
                content: line.to_string(),
            })
        })
        .collect()
}

/// `pids.max`, the same file on v1 and v2: a number, or `max`.
pub fn pids_max(dir: &Path) -> Result<Option<u64>, StatsError> {
    read_max(&dir.join("pids.max"))
}

/// A `*.max` file: a number, or `max` for no limit (`None`). A missing
/// file is [`StatsError::Missing`].
pub(crate) fn read_max(file: &Path) -> Result<Option<u64>, StatsError> {
    let text = read_file(file)?;
    match text.trim() {
        "max" => Ok(None),
        value => value.parse().map(Some).map_err(|_| StatsError::Parse {
            file: file.to_path_buf(),
            content: text.clone(),
        }),
    }
}

/// Runs `reader` on `dir` if given; a missing file or dir gives `None`.
fn optional<T>(
    dir: Option<&Path>,
    reader: fn(&Path) -> Result<T, StatsError>,
) -> Result<Option<T>, StatsError> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    match reader(dir) {
        Ok(value) => Ok(Some(value)),
        Err(StatsError::Missing { .. }) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Reads a whole small file; NotFound becomes [`StatsError::Missing`].
pub(crate) fn read_file(file: &Path) -> Result<String, StatsError> {
    std::fs::read_to_string(file).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            StatsError::Missing {
                file: file.to_path_buf(),
            }
        } else {
            StatsError::Io {
                file: file.to_path_buf(),
                source,
            }
        }
    })
}

/// Reads a file holding one unsigned number.
pub(crate) fn read_u64(file: &Path) -> Result<u64, StatsError> {
    let text = read_file(file)?;
    text.trim().parse().map_err(|_| StatsError::Parse {
        file: file.to_path_buf(),
        content: text,
    })
}

/// Parses a flat keyed file (`memory.stat`, `cpu.stat`): one `key value`
/// pair per line. Lines that are not such a pair are skipped, as newer
/// kernels add keys and formats.
pub fn parse_flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let key = parts.next()?;
            let value = parts.next()?.parse().ok()?;
            parts.next().is_none().then_some((key, value))
        })
        .collect()
}

/// A flat keyed file's value for `key`, or a parse error naming the file.
pub(crate) fn keyed(map: &HashMap<&str, u64>, key: &str, file: &Path) -> Result<u64, StatsError> {
    map.get(key).copied().ok_or_else(|| StatsError::Parse {
        file: file.to_path_buf(),
        content: format!("no {key} line"),
    })
}

/// Working set: usage minus the inactive file cache (which the kernel
/// reclaims first), never below zero, as cadvisor computes it.
pub fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

#[cfg(test)]
mod tests;
