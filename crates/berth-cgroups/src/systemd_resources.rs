//! A resource update as systemd unit properties. systemd rewrites a unit's
//! cgroup files from its properties on every `daemon-reload` (and when it
//! starts a sibling): limits written only to the files would silently fall
//! back to the ones the unit was started with. runc sets both, and so does
//! berth; these are the property names and units runc uses.

use crate::systemd::UnitProperty;
use crate::update::ResourceUpdate;

/// The kernel's default CFS period, for a quota sent without one.
const DEFAULT_CPU_PERIOD_US: u64 = 100_000;
/// systemd keeps CPU quotas in whole 10 ms per second.
const CPU_QUOTA_GRANULARITY_US: u64 = 10_000;

/// The properties for `update` on a unit in a cgroup v2 (`unified`) or v1
/// hierarchy; fields the update leaves alone give none.
pub fn unit_properties(update: &ResourceUpdate, unified: bool) -> Vec<UnitProperty> {
    let mut props = Vec::new();
    if let Some(limit) = update.memory_limit {
        let name = if unified { "MemoryMax" } else { "MemoryLimit" };
        props.push(UnitProperty::U64(name, limit_or_infinity(limit)));
    }
    if let Some(shares) = update.cpu_shares {
        props.push(if unified {
            UnitProperty::U64("CPUWeight", shares_to_weight(shares))
        } else {
            UnitProperty::U64("CPUShares", shares)
        });
    }
    if update.cpu_quota.is_some() || update.cpu_period.is_some() {
        if let Some(period) = update.cpu_period {
            props.push(UnitProperty::U64("CPUQuotaPeriodUSec", period));
        }
        if let Some(quota) = update.cpu_quota {
            let period = update.cpu_period.unwrap_or(DEFAULT_CPU_PERIOD_US);
            props.push(UnitProperty::U64(
                "CPUQuotaPerSecUSec",
                quota_per_second(quota, period),
            ));
        }
    }
    if unified {
        if let Some(cpus) = &update.cpuset_cpus {
            if let Some(mask) = cpu_list_to_mask(cpus) {
                props.push(UnitProperty::Bytes("AllowedCPUs", mask));
            }
        }
        if let Some(mems) = &update.cpuset_mems {
            if let Some(mask) = cpu_list_to_mask(mems) {
                props.push(UnitProperty::Bytes("AllowedMemoryNodes", mask));
            }
        }
    }
    props
}

/// A byte limit; a negative one (CRI's "no limit") is systemd's infinity.
fn limit_or_infinity(limit: i64) -> u64 {
    u64::try_from(limit).unwrap_or(u64::MAX)
}

/// cgroup v1 `cpu.shares` (2..=262144) to v2 `cpu.weight` (1..=10000), the
/// linear map the kernel documentation and runc use.
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// A CFS quota per `period` µs as µs of CPU per second, rounded up to
/// systemd's 10 ms granularity (as runc does, so the limit is never
/// tighter than asked); no quota (negative) is infinity.
pub fn quota_per_second(quota: i64, period: u64) -> u64 {
    let Ok(quota) = u64::try_from(quota) else {
        return u64::MAX;
    };
    if period == 0 {
        return u64::MAX;
    }
    let per_second = quota.saturating_mul(1_000_000) / period;
    per_second
        .div_ceil(CPU_QUOTA_GRANULARITY_US)
        .saturating_mul(CPU_QUOTA_GRANULARITY_US)
}

/// A cpuset list (`0-3,6`) as the bitmask systemd takes: bit `n % 8` of
/// byte `n / 8` for CPU (or node) `n`. `None` for a malformed list or one
/// naming a CPU past 8191, which systemd would refuse.
pub fn cpu_list_to_mask(list: &str) -> Option<Vec<u8>> {
    const MAX_CPU: usize = 8191;
    let mut mask = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let n = part.parse::<usize>().ok()?;
                (n, n)
            }
        };
        if first > last || last > MAX_CPU {
            return None;
        }
        if mask.len() <= last / 8 {
            mask.resize(last / 8 + 1, 0);
        }
        for cpu in first..=last {
            mask[cpu / 8] |= 1 << (cpu % 8);
        }
    }
    (!mask.is_empty()).then_some(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_update_sets_nothing() {
        assert!(unit_properties(&ResourceUpdate::default(), true).is_empty());
    }

    #[test]
    fn v2_names_and_units() {
        let update = ResourceUpdate {
            cpu_shares: Some(1024),
            cpu_quota: Some(25_000),
            cpu_period: Some(100_000),
            cpuset_cpus: Some("0-1".into()),
            memory_limit: Some(128 << 20),
            ..Default::default()
        };
        assert_eq!(
            unit_properties(&update, true),
            vec![
                UnitProperty::U64("MemoryMax", 128 << 20),
                UnitProperty::U64("CPUWeight", 39),
                UnitProperty::U64("CPUQuotaPeriodUSec", 100_000),
                UnitProperty::U64("CPUQuotaPerSecUSec", 250_000),
                UnitProperty::Bytes("AllowedCPUs", vec![0b11]),
            ]
        );
    }

    #[test]
    fn v1_names_and_no_cpuset() {
        let update = ResourceUpdate {
            cpu_shares: Some(512),
            cpuset_cpus: Some("0".into()),
            memory_limit: Some(64 << 20),
            ..Default::default()
        };
        assert_eq!(
            unit_properties(&update, false),
            vec![
                UnitProperty::U64("MemoryLimit", 64 << 20),
                UnitProperty::U64("CPUShares", 512),
            ]
        );
    }

    #[test]
    fn no_limit_is_infinity() {
        let update = ResourceUpdate {
            cpu_quota: Some(-1),
            memory_limit: Some(-1),
            ..Default::default()
        };
        assert_eq!(
            unit_properties(&update, true),
            vec![
                UnitProperty::U64("MemoryMax", u64::MAX),
                UnitProperty::U64("CPUQuotaPerSecUSec", u64::MAX),
            ]
        );
    }

    #[test]
    fn quotas_round_up_to_ten_milliseconds() {
        assert_eq!(quota_per_second(20_000, 100_000), 200_000);
        // 1 ms per 30 ms is 33.3 ms per second: 40 ms, never less.
        assert_eq!(quota_per_second(1_000, 30_000), 40_000);
        assert_eq!(quota_per_second(1, 0), u64::MAX);
        assert_eq!(quota_per_second(i64::MAX, 1), u64::MAX);
    }

    #[test]
    fn weights_span_the_v2_range() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(0), 1);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(u64::MAX), 10_000);
        // kubelet's 100m request.
        assert_eq!(shares_to_weight(102), 4);
    }

    #[test]
    fn cpu_lists_become_little_endian_masks() {
        assert_eq!(cpu_list_to_mask("0"), Some(vec![1]));
        assert_eq!(cpu_list_to_mask("0-3,6"), Some(vec![0b0100_1111]));
        assert_eq!(cpu_list_to_mask("9"), Some(vec![0, 0b10]));
        assert_eq!(cpu_list_to_mask(" 1 , 3-4 "), Some(vec![0b1_1010]));
        assert_eq!(cpu_list_to_mask(""), None);
        assert_eq!(cpu_list_to_mask("3-1"), None);
        assert_eq!(cpu_list_to_mask("x"), None);
        assert_eq!(cpu_list_to_mask("9000"), None);
    }
}
