//! cgroup v2 readers: `cpu.stat`, `cpu.max`, `cpu.weight`,
//! `memory.current`, `memory.stat`, `memory.events`, `memory.peak`,
//! `memory.min`, `memory.max`, `memory.swap.current`, `memory.swap.max` and
//! `pids.current`, all in the cgroup's one dir.

use std::path::Path;

use super::{keyed, parse_flat_keyed, read_file, read_u64, working_set};
use super::{CpuLimits, CpuSplit, MemoryCounters, Throttling};
use super::{CpuStats, MemoryStats, PidsStats, StatsError};

/// Cpu time from `cpu.stat`'s `usage_usec` (present even without the cpu
/// controller enabled).
pub fn cpu(dir: &Path) -> Result<CpuStats, StatsError> {
    let file = dir.join("cpu.stat");
    let text = read_file(&file)?;
    let usage_us = keyed(&parse_flat_keyed(&text), "usage_usec", &file)?;
    Ok(CpuStats {
        usage_ns: usage_us.saturating_mul(1000),
    })
}

/// Memory, when the memory controller is enabled for the cgroup. v2's
/// `memory.stat` counts the subtree without `total_` prefixes.
pub fn memory(dir: &Path) -> Result<MemoryStats, StatsError> {
    let usage = read_u64(&dir.join("memory.current"))?;
    let stat_file = dir.join("memory.stat");
    let text = read_file(&stat_file)?;
    let stat = parse_flat_keyed(&text);
    Ok(MemoryStats {
        usage_bytes: usage,
        working_set_bytes: working_set(usage, keyed(&stat, "inactive_file", &stat_file)?),
        rss_bytes: keyed(&stat, "anon", &stat_file)?,
        page_faults: keyed(&stat, "pgfault", &stat_file)?,
        major_page_faults: keyed(&stat, "pgmajfault", &stat_file)?,
        limit_bytes: read_max(&dir.join("memory.max"))?,
        swap_usage_bytes: read_u64(&dir.join("memory.swap.current")).ok(),
        swap_limit_bytes: read_max(&dir.join("memory.swap.max")).unwrap_or(None),
    })
}

/// Tasks in the cgroup's subtree, from `pids.current`.
pub fn pids(dir: &Path) -> Result<PidsStats, StatsError> {
    Ok(PidsStats {
        current: read_u64(&dir.join("pids.current"))?,
    })
}

/// A `*.max` file; a missing one is no limit.
fn read_max(file: &Path) -> Result<Option<u64>, StatsError> {
    match super::read_max(file) {
        Err(StatsError::Missing { .. }) => Ok(None),
        other => other,
    }
}

/// User and system time from `cpu.stat` (always present).
pub fn cpu_split(dir: &Path) -> Result<CpuSplit, StatsError> {
    let file = dir.join("cpu.stat");
    let text = read_file(&file)?;
    let stat = parse_flat_keyed(&text);
    Ok(CpuSplit {
        user_ns: keyed(&stat, "user_usec", &file)?.saturating_mul(1000),
        system_ns: keyed(&stat, "system_usec", &file)?.saturating_mul(1000),
    })
}

/// Throttling from `cpu.stat`, whose `nr_periods` lines only exist with
/// the cpu controller enabled.
pub fn throttling(dir: &Path) -> Result<Throttling, StatsError> {
    let file = dir.join("cpu.stat");
    let text = read_file(&file)?;
    let stat = parse_flat_keyed(&text);
    if !stat.contains_key("nr_periods") {
        return Err(StatsError::Missing { file });
    }
    Ok(Throttling {
        periods: keyed(&stat, "nr_periods", &file)?,
        throttled_periods: keyed(&stat, "nr_throttled", &file)?,
        throttled_ns: keyed(&stat, "throttled_usec", &file)?.saturating_mul(1000),
    })
}

/// `cpu.max` (`$QUOTA $PERIOD`, quota `max` for none) and `cpu.weight`
/// converted back to shares the way cadvisor does (the inverse of the OCI
/// runtimes' shares-to-weight mapping).
pub fn cpu_limits(dir: &Path) -> Result<CpuLimits, StatsError> {
    let file = dir.join("cpu.max");
    let text = read_file(&file)?;
    let parse_error = || StatsError::Parse {
        file: file.clone(),
        content: text.clone(),
    };
    let mut fields = text.split_whitespace();
    let quota = match fields.next().ok_or_else(parse_error)? {
        "max" => None,
        quota => Some(quota.parse().map_err(|_| parse_error())?),
    };
    let period_us = fields
        .next()
        .ok_or_else(parse_error)?
        .parse()
        .map_err(|_| parse_error())?;
    let weight = read_u64(&dir.join("cpu.weight"))?;
    Ok(CpuLimits {
        period_us,
        quota_us: quota,
        shares: weight_to_shares(weight),
    })
}

/// cgroup v2 weight (1..=10000) as v1 shares (2..=262144).
pub fn weight_to_shares(weight: u64) -> u64 {
    if weight == 0 {
        return 0;
    }
    2 + (weight - 1) * 262_142 / 9_999
}

/// Cache, mapped files and kernel memory from `memory.stat`; limit hits
/// and OOM kills from `memory.events`; the peak from `memory.peak` (Linux
/// 5.19+); the reservation from `memory.min`.
pub fn memory_counters(dir: &Path) -> Result<MemoryCounters, StatsError> {
    let stat_file = dir.join("memory.stat");
    let text = read_file(&stat_file)?;
    let stat = parse_flat_keyed(&text);
    let events_file = dir.join("memory.events");
    let events_text = read_file(&events_file).unwrap_or_default();
    let events = parse_flat_keyed(&events_text);
    let page_faults = keyed(&stat, "pgfault", &stat_file)?;
    let major_page_faults = keyed(&stat, "pgmajfault", &stat_file)?;
    Ok(MemoryCounters {
        cache_bytes: keyed(&stat, "file", &stat_file)?,
        mapped_file_bytes: keyed(&stat, "file_mapped", &stat_file)?,
        // `kernel` sums all kernel memory (Linux 5.18+).
        kernel_bytes: stat.get("kernel").copied(),
        failcnt: events.get("max").copied().unwrap_or(0),
        max_usage_bytes: read_u64(&dir.join("memory.peak")).ok(),
        oom_kills: events.get("oom_kill").copied(),
        own_page_faults: page_faults,
        own_major_page_faults: major_page_faults,
        reservation_bytes: read_max(&dir.join("memory.min"))
            .unwrap_or(None)
            .filter(|min| *min > 0),
        raw_swap_limit_bytes: read_max(&dir.join("memory.swap.max")).unwrap_or(None),
    })
}
