use super::*;
use cri_api::v1::HugepageLimit;

const V1: CgroupFeatures = CgroupFeatures {
    v2: false,
    hugetlb: true,
    swap: true,
};
const V2: CgroupFeatures = CgroupFeatures {
    v2: true,
    hugetlb: true,
    swap: true,
};

fn burstable() -> LinuxContainerResources {
    // kubelet's values for requests.cpu=250m, limits.cpu=500m, limits.memory=128Mi.
    LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 256,
        memory_limit_in_bytes: 128 << 20,
        oom_score_adj: 968,
        cpuset_cpus: "0-1".into(),
        cpuset_mems: "0".into(),
        ..Default::default()
    }
}

#[test]
fn values_are_copied_without_conversion() {
    let oci = container_resources(Some(&burstable()), V1).unwrap();
    let cpu = oci.cpu().clone().unwrap();
    assert_eq!(cpu.shares(), Some(256));
    assert_eq!(cpu.quota(), Some(50_000));
    assert_eq!(cpu.period(), Some(100_000));
    assert_eq!(cpu.cpus().as_deref(), Some("0-1"));
    assert_eq!(cpu.mems().as_deref(), Some("0"));
    let memory = oci.memory().unwrap();
    assert_eq!(memory.limit(), Some(128 << 20));
    // Swap equals the limit: no swapping by default.
    assert_eq!(memory.swap(), Some(128 << 20));
}

#[test]
fn zero_means_unset() {
    let oci = container_resources(Some(&LinuxContainerResources::default()), V1).unwrap();
    assert!(oci.cpu().is_none());
    assert!(oci.memory().is_none());
    assert!(oci.hugepage_limits().is_none());
    assert!(oci.unified().is_none());
    assert_eq!(
        container_resources(None, V1).unwrap(),
        LinuxResources::default()
    );
}

#[test]
fn unlimited_quota_is_kept() {
    let resources = LinuxContainerResources {
        cpu_quota: -1,
        ..Default::default()
    };
    let oci = container_resources(Some(&resources), V1).unwrap();
    assert_eq!(oci.cpu().clone().unwrap().quota(), Some(-1));
}

#[test]
fn explicit_swap_limit_wins() {
    let mut resources = burstable();
    resources.memory_swap_limit_in_bytes = 256 << 20;
    let oci = container_resources(Some(&resources), V1).unwrap();
    assert_eq!(oci.memory().unwrap().swap(), Some(256 << 20));
}

#[test]
fn no_swap_accounting_means_no_swap_limit() {
    let features = CgroupFeatures { swap: false, ..V1 };
    let oci = container_resources(Some(&burstable()), features).unwrap();
    assert_eq!(oci.memory().unwrap().swap(), None);
    assert_eq!(oci.memory().unwrap().limit(), Some(128 << 20));
}

#[test]
fn unified_swap_max_overrides_the_default_swap() {
    let mut resources = burstable();
    resources.unified = [("memory.swap.max".to_string(), "max".to_string())].into();
    let oci = container_resources(Some(&resources), V2).unwrap();
    assert_eq!(oci.memory().unwrap().swap(), None);
    assert_eq!(oci.unified().as_ref().unwrap()["memory.swap.max"], "max");
}

#[test]
fn unified_on_v1_is_an_error_naming_the_keys() {
    let mut resources = burstable();
    resources.unified = [
        ("memory.high".to_string(), "1G".to_string()),
        ("cpu.idle".to_string(), "1".to_string()),
    ]
    .into();
    let err = container_resources(Some(&resources), V1).unwrap_err();
    assert!(
        matches!(&err, SpecError::UnifiedOnCgroupV1(keys) if keys == &["cpu.idle", "memory.high"])
    );
}

#[test]
fn hugepages_only_where_the_controller_is() {
    let mut resources = burstable();
    resources.hugepage_limits = vec![HugepageLimit {
        page_size: "2MB".into(),
        limit: 4 << 20,
    }];
    let oci = container_resources(Some(&resources), V1).unwrap();
    let limits = oci.hugepage_limits().clone().unwrap();
    assert_eq!(
        (limits[0].page_size().as_str(), limits[0].limit()),
        ("2MB", 4 << 20)
    );
    let without = CgroupFeatures {
        hugetlb: false,
        ..V1
    };
    assert!(container_resources(Some(&resources), without)
        .unwrap()
        .hugepage_limits()
        .is_none());
}

#[test]
fn huge_hugepage_limit_is_an_error() {
    let mut resources = burstable();
    resources.hugepage_limits = vec![HugepageLimit {
        page_size: "1GB".into(),
        limit: u64::MAX,
    }];
    assert!(matches!(
        container_resources(Some(&resources), V1),
        Err(SpecError::HugepageLimit { .. })
    ));
}

#[test]
fn oom_score_adj_is_clamped_to_the_floor_and_1000() {
    let with = |adj: i64| LinuxContainerResources {
        oom_score_adj: adj,
        ..Default::default()
    };
    assert_eq!(oom_score_adj(Some(&with(968)), 0), 968);
    assert_eq!(oom_score_adj(Some(&with(-998)), 0), 0);
    assert_eq!(oom_score_adj(Some(&with(-998)), -1000), -998);
    assert_eq!(oom_score_adj(Some(&with(5000)), 0), 1000);
    assert_eq!(oom_score_adj(Some(&with(-5000)), -2000), -1000);
}

#[test]
fn without_resources_the_score_is_zero_not_berthds() {
    // berthd under its unit runs at -999: the container must not inherit it.
    assert_eq!(oom_score_adj(None, -999), 0);
    assert_eq!(
        oom_score_adj(Some(&LinuxContainerResources::default()), -999),
        0
    );
    // A berthd at a higher score still bounds it (the kernel would refuse).
    assert_eq!(oom_score_adj(None, 500), 500);
}

#[test]
fn shares_to_weight_follows_runc() {
    assert_eq!(cpu_shares_to_weight(0), 0);
    assert_eq!(cpu_shares_to_weight(2), 1);
    assert_eq!(cpu_shares_to_weight(1024), 39);
    assert_eq!(cpu_shares_to_weight(262_144), 10_000);
    // Outside the v1 range: clamped, never underflowing.
    assert_eq!(cpu_shares_to_weight(1), 1);
    assert_eq!(cpu_shares_to_weight(1 << 40), 10_000);
    // The formula exactly: 1 + ((shares - 2) * 9999) / 262142.
    assert_eq!(cpu_shares_to_weight(512), 1 + (510 * 9999) / 262_142);
}
