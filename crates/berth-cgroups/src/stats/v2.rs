//! cgroup v2 readers: `cpu.stat`, `memory.current`, `memory.stat`,
//! `memory.max`, `memory.swap.current`, `memory.swap.max` and
//! `pids.current`, all in the cgroup's one dir.

use std::path::Path;

use super::{keyed, parse_flat_keyed, read_file, read_u64, working_set};
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

/// A `*.max` file: a number, or `max` for no limit (`None`).
fn read_max(file: &Path) -> Result<Option<u64>, StatsError> {
    let text = match read_file(file) {
        Ok(text) => text,
        Err(StatsError::Missing { .. }) => return Ok(None),
        Err(err) => return Err(err),
    };
    match text.trim() {
        "max" => Ok(None),
        value => value.parse().map(Some).map_err(|_| StatsError::Parse {
            file: file.to_path_buf(),
            content: text.clone(),
        }),
    }
}
