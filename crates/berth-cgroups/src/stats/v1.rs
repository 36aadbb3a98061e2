//! cgroup v1 readers: `cpuacct.usage*`, the cpu controller's `cpu.stat`
//! and CFS settings, the memory controller's `memory.stat`,
//! `memory.usage_in_bytes`, `memory.limit_in_bytes`, `memory.memsw.*`,
//! `memory.failcnt`, `memory.max_usage_in_bytes`, `memory.oom_control`,
//! `memory.soft_limit_in_bytes` and `memory.kmem.usage_in_bytes`, and
//! `pids.current`, each from its controller's dir.

use std::path::Path;

use super::{keyed, parse_flat_keyed, read_file, read_u64, working_set};
use super::{CpuLimits, CpuSplit, MemoryCounters, Throttling};
use super::{CpuStats, MemoryStats, PidsStats, StatsError};

/// v1 reports "no limit" as the page counter's maximum (rounded to pages),
/// which differs between kernels; anything this large is no limit.
const UNLIMITED_FLOOR: u64 = 1 << 62;

/// Cpu time from `cpuacct.usage` (already nanoseconds).
pub fn cpu(dir: &Path) -> Result<CpuStats, StatsError> {
    Ok(CpuStats {
        usage_ns: read_u64(&dir.join("cpuacct.usage"))?,
    })
}

/// Memory from the memory controller's dir. The `total_` keys of
/// `memory.stat` cover the whole subtree, as the usage does.
pub fn memory(dir: &Path) -> Result<MemoryStats, StatsError> {
    let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
    let stat_file = dir.join("memory.stat");
    let text = read_file(&stat_file)?;
    let stat = parse_flat_keyed(&text);
    let limit = read_u64(&dir.join("memory.limit_in_bytes"))
        .ok()
        .and_then(limit_or_unlimited);
    // memsw files exist only with swap accounting (swapaccount=1).
    let memsw_usage = read_u64(&dir.join("memory.memsw.usage_in_bytes")).ok();
    let memsw_limit = read_u64(&dir.join("memory.memsw.limit_in_bytes"))
        .ok()
        .and_then(limit_or_unlimited);
    Ok(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: working_set(usage, keyed(&stat, "total_inactive_file", &stat_file)?),
        rss_bytes: keyed(&stat, "total_rss", &stat_file)?,
        page_faults: keyed(&stat, "total_pgfault", &stat_file)?,
        major_page_faults: keyed(&stat, "total_pgmajfault", &stat_file)?,
        limit_bytes: limit,
        swap_usage_bytes: memsw_usage.map(|memsw| memsw.saturating_sub(usage)),
        // memsw limits memory plus swap together: swap may use what the
        // memory limit leaves of it.
        swap_limit_bytes: memsw_limit.map(|memsw| memsw.saturating_sub(limit.unwrap_or(0))),
    })
}

/// Tasks in the cgroup's subtree, from `pids.current`.
pub fn pids(dir: &Path) -> Result<PidsStats, StatsError> {
    Ok(PidsStats {
        current: read_u64(&dir.join("pids.current"))?,
    })
}

/// A v1 limit, or `None` for the "unlimited" sentinel.
fn limit_or_unlimited(value: u64) -> Option<u64> {
    (value < UNLIMITED_FLOOR).then_some(value)
}

/// User and system time from `cpuacct.usage_user` and `cpuacct.usage_sys`
/// (nanoseconds, Linux 4.6+).
pub fn cpu_split(dir: &Path) -> Result<CpuSplit, StatsError> {
    Ok(CpuSplit {
        user_ns: read_u64(&dir.join("cpuacct.usage_user"))?,
        system_ns: read_u64(&dir.join("cpuacct.usage_sys"))?,
    })
}

/// Throttling from the cpu controller's `cpu.stat` (`throttled_time` in
/// nanoseconds).
pub fn throttling(dir: &Path) -> Result<Throttling, StatsError> {
    let file = dir.join("cpu.stat");
    let text = read_file(&file)?;
    let stat = parse_flat_keyed(&text);
    Ok(Throttling {
        periods: keyed(&stat, "nr_periods", &file)?,
        throttled_periods: keyed(&stat, "nr_throttled", &file)?,
        throttled_ns: keyed(&stat, "throttled_time", &file)?,
    })
}

/// `cpu.cfs_period_us`, `cpu.cfs_quota_us` (-1 for none) and `cpu.shares`.
pub fn cpu_limits(dir: &Path) -> Result<CpuLimits, StatsError> {
    let quota_file = dir.join("cpu.cfs_quota_us");
    let quota_text = read_file(&quota_file)?;
    let quota: i64 = quota_text.trim().parse().map_err(|_| StatsError::Parse {
        file: quota_file.clone(),
        content: quota_text.clone(),
    })?;
    Ok(CpuLimits {
        period_us: read_u64(&dir.join("cpu.cfs_period_us"))?,
        quota_us: u64::try_from(quota).ok(),
        shares: read_u64(&dir.join("cpu.shares"))?,
    })
}

/// Cache, mapped files, own page faults, limit hits, peak, OOM kills,
/// kernel memory, soft limit and the raw memory+swap limit.
pub fn memory_counters(dir: &Path) -> Result<MemoryCounters, StatsError> {
    let stat_file = dir.join("memory.stat");
    let text = read_file(&stat_file)?;
    let stat = parse_flat_keyed(&text);
    let oom_text = read_file(&dir.join("memory.oom_control")).unwrap_or_default();
    Ok(MemoryCounters {
        cache_bytes: keyed(&stat, "total_cache", &stat_file)?,
        mapped_file_bytes: keyed(&stat, "total_mapped_file", &stat_file)?,
        kernel_bytes: read_u64(&dir.join("memory.kmem.usage_in_bytes")).ok(),
        failcnt: read_u64(&dir.join("memory.failcnt"))?,
        max_usage_bytes: read_u64(&dir.join("memory.max_usage_in_bytes")).ok(),
        // `oom_kill` is counted since Linux 4.13.
        oom_kills: parse_flat_keyed(&oom_text).get("oom_kill").copied(),
        own_page_faults: keyed(&stat, "pgfault", &stat_file)?,
        own_major_page_faults: keyed(&stat, "pgmajfault", &stat_file)?,
        reservation_bytes: read_u64(&dir.join("memory.soft_limit_in_bytes"))
            .ok()
            .and_then(limit_or_unlimited),
        raw_swap_limit_bytes: read_u64(&dir.join("memory.memsw.limit_in_bytes"))
            .ok()
            .and_then(limit_or_unlimited),
    })
}
