//! cgroup v1 readers: `cpuacct.usage`, the memory controller's
//! `memory.stat`, `memory.usage_in_bytes`, `memory.limit_in_bytes` and
//! `memory.memsw.*`, and `pids.current`, each from its controller's dir.

use std::path::Path;

use super::{keyed, parse_flat_keyed, read_file, read_u64, working_set};
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
