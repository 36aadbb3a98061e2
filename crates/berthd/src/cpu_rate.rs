//! Nano-cores: cpu usage as a rate, from two samples of cumulative cpu time.
//! The previous sample of each container and pod is kept here, as the
//! cgroup only gives totals.

use std::collections::HashMap;
use std::sync::Mutex;

/// One reading of cumulative cpu time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSample {
    /// When it was read, in nanoseconds since the epoch.
    pub at_ns: i64,
    /// Cpu time used so far, in nanoseconds.
    pub usage_ns: u64,
}

/// Average usage between two samples in billionths of a core; `None`
/// when time did not move forward or the counter went back (a new cgroup
/// under the same id).
pub fn nano_cores(previous: CpuSample, current: CpuSample) -> Option<u64> {
    let elapsed = u64::try_from(current.at_ns.checked_sub(previous.at_ns)?).ok()?;
    if elapsed == 0 {
        return None;
    }
    let used = current.usage_ns.checked_sub(previous.usage_ns)?;
    // used/elapsed cores, times 1e9; in u128 so long idle gaps cannot overflow.
    u64::try_from(u128::from(used) * 1_000_000_000 / u128::from(elapsed)).ok()
}

/// The last sample per container or pod id.
#[derive(Default)]
pub struct CpuSamples {
    last: Mutex<HashMap<String, CpuSample>>,
}

impl CpuSamples {
    /// Records `current` for `id` and returns the rate since the sample
    /// before it; the first sample of an id has no rate.
    pub fn rate(&self, id: &str, current: CpuSample) -> Option<u64> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match last.insert(id.to_string(), current) {
            // A sample read concurrently but older than the one kept must
            // not replace it (nor yield a rate).
            Some(previous) if previous.at_ns > current.at_ns => {
                last.insert(id.to_string(), previous);
                None
            }
            Some(previous) => nano_cores(previous, current),
            None => None,
        }
    }

    /// Forgets a removed container or pod.
    pub fn forget(&self, id: &str) {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ns: i64, usage_ns: u64) -> CpuSample {
        CpuSample { at_ns, usage_ns }
    }

    #[test]
    fn half_a_core() {
        assert_eq!(
            nano_cores(sample(0, 0), sample(2_000_000_000, 1_000_000_000)),
            Some(500_000_000)
        );
    }

    #[test]
    fn no_rate_without_progress() {
        assert_eq!(nano_cores(sample(5, 10), sample(5, 20)), None);
        assert_eq!(nano_cores(sample(5, 10), sample(4, 20)), None);
        assert_eq!(nano_cores(sample(0, 10), sample(9, 5)), None);
    }

    #[test]
    fn samples_are_kept_per_id() {
        let samples = CpuSamples::default();
        assert_eq!(samples.rate("a", sample(0, 0)), None);
        assert_eq!(samples.rate("b", sample(0, 0)), None);
        assert_eq!(samples.rate("a", sample(1_000, 1_000)), Some(1_000_000_000));
        assert_eq!(samples.rate("a", sample(500, 0)), None, "older sample");
        assert_eq!(samples.rate("a", sample(2_000, 1_250)), Some(250_000_000));
        samples.forget("b");
        assert_eq!(
            samples.rate("b", sample(9_000, 9_000)),
            None,
            "b was forgotten"
        );
    }
}
