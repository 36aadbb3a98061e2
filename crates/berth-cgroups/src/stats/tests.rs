//! The readers against fixture files copied in the kernel's formats
//! (`fixtures/stats`): v1 as on a hybrid host, v2 as on a unified one.

use super::*;

/// Read at run time: a target dir shared between checkouts keeps a test
/// binary built in another one, with that checkout's path compiled in.
fn fixture(rel: &str) -> PathBuf {
    let crate_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or(PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    crate_dir.join("fixtures/stats").join(rel)
}

const MIB: u64 = 1024 * 1024;

/// What the v1 and v2 fixtures count on device 254:0.
const VDA_IO: DeviceIo = DeviceIo {
    major: 254,
    minor: 0,
    read_bytes: MIB,
    write_bytes: 2 * MIB,
    reads: 10,
    writes: 20,
};

/// The stats of the v2 fixture with every file.
fn full_v2() -> CgroupStats {
    read(&StatsDirs::V2 {
        dir: fixture("v2/full"),
    })
    .unwrap()
}

#[test]
fn v1_reads_every_controller() {
    let dirs = StatsDirs::V1 {
        cpuacct: Some(fixture("v1/cpuacct")),
        cpu: None,
        memory: Some(fixture("v1/memory")),
        pids: Some(fixture("v1/pids")),
        blkio: Some(fixture("v1/blkio")),
    };
    let stats = read(&dirs).unwrap();
    assert_eq!(
        stats.cpu,
        Some(CpuStats {
            usage_ns: 123456789
        })
    );
    let memory = stats.memory.unwrap();
    assert_eq!(memory.usage_bytes, 70 * MIB);
    // usage minus total_inactive_file (16 MiB), not inactive_file.
    assert_eq!(memory.working_set_bytes, 54 * MIB);
    assert_eq!(memory.rss_bytes, 50 * MIB);
    assert_eq!((memory.page_faults, memory.major_page_faults), (41000, 17));
    assert_eq!(memory.limit_bytes, Some(256 * MIB));
    assert_eq!(memory.swap_usage_bytes, Some(2 * MIB));
    assert_eq!(memory.swap_limit_bytes, Some(256 * MIB));
    assert_eq!(stats.pids, Some(PidsStats { current: 3 }));
}

#[test]
fn v1_without_swap_accounting_or_limit() {
    let memory = v1::memory(&fixture("v1/memory-noswap")).unwrap();
    assert_eq!(
        memory.limit_bytes, None,
        "the page counter maximum is no limit"
    );
    assert_eq!(memory.swap_usage_bytes, None);
    assert_eq!(memory.swap_limit_bytes, None);
}

#[test]
fn v1_missing_controllers_are_none() {
    let dirs = StatsDirs::V1 {
        cpuacct: Some(fixture("v1/cpuacct")),
        cpu: None,
        memory: Some(fixture("v1/absent")),
        pids: None,
        blkio: None,
    };
    let stats = read(&dirs).unwrap();
    assert!(stats.cpu.is_some());
    assert_eq!((stats.memory, stats.pids), (None, None));
}

#[test]
fn v2_reads_one_dir() {
    let stats = full_v2();
    assert_eq!(
        stats.cpu,
        Some(CpuStats {
            usage_ns: 2_500_000_000
        })
    );
    let memory = stats.memory.unwrap();
    assert_eq!(memory.usage_bytes, 70 * MIB);
    assert_eq!(memory.working_set_bytes, 54 * MIB);
    assert_eq!(memory.rss_bytes, 50 * MIB);
    assert_eq!((memory.page_faults, memory.major_page_faults), (41000, 17));
    assert_eq!(memory.limit_bytes, Some(256 * MIB));
    assert_eq!(memory.swap_usage_bytes, Some(MIB));
    assert_eq!(memory.swap_limit_bytes, None, "max is no limit");
    assert_eq!(stats.pids, Some(PidsStats { current: 4 }));
}

#[test]
fn v2_without_memory_and_pids_controllers() {
    // A hybrid host's unified hierarchy, or controllers not delegated.
    let stats = read(&StatsDirs::V2 {
        dir: fixture("v2/cpu-only"),
    })
    .unwrap();
    assert_eq!(
        stats.cpu,
        Some(CpuStats {
            usage_ns: 2_500_000_000
        })
    );
    assert_eq!((stats.memory, stats.pids), (None, None));
}

#[test]
fn missing_cgroup_is_an_error_naming_it() {
    let dir = fixture("v2/gone");
    let err = read(&StatsDirs::V2 { dir: dir.clone() }).unwrap_err();
    assert!(
        matches!(err, StatsError::Missing { ref file } if *file == dir),
        "{err}"
    );
    let err = read(&StatsDirs::V1 {
        cpuacct: None,
        cpu: None,
        memory: Some(fixture("v1/gone")),
        pids: None,
        blkio: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("v1/gone"), "{err}");
}

#[test]
fn garbage_is_a_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cpuacct.usage"), "lots\n").unwrap();
    let err = v1::cpu(dir.path()).unwrap_err();
    assert!(matches!(err, StatsError::Parse { .. }), "{err}");
}

#[test]
fn flat_keyed_skips_odd_lines() {
    let map = parse_flat_keyed("a 1\nb two\nc 3 4\n\nd 5\n");
    assert_eq!(map.len(), 2);
    assert_eq!((map["a"], map["d"]), (1, 5));
}

#[test]
fn working_set_never_goes_negative() {
    assert_eq!(working_set(100, 30), 70);
    assert_eq!(working_set(10, 30), 0);
}

#[test]
fn accumulate_adds_usage_and_drops_limits() {
    let one = full_v2();
    let mut sum = CgroupStats::default();
    sum.accumulate(&one);
    sum.accumulate(&one);
    assert_eq!(sum.cpu.unwrap().usage_ns, 5_000_000_000);
    let memory = sum.memory.unwrap();
    assert_eq!(memory.working_set_bytes, 108 * MIB);
    assert_eq!(memory.limit_bytes, None);
    assert_eq!(memory.swap_usage_bytes, Some(2 * MIB));
    assert_eq!(sum.pids.unwrap().current, 8);
}

#[test]
fn v1_reads_blkio_per_device() {
    let io = block_io::v1(&fixture("v1/blkio")).unwrap();
    assert_eq!(
        io.devices,
        [
            DeviceIo {
                major: 8,
                minor: 16,
                read_bytes: 4096,
                write_bytes: 0,
                reads: 1,
                writes: 0
            },
            VDA_IO
        ]
    );
}

#[test]
fn v2_reads_io_and_pressure() {
    let stats = full_v2();
    let io = stats.io.unwrap();
    assert_eq!(io.devices, [VDA_IO]);
    let pressure = stats.pressure.unwrap();
    let cpu = pressure.cpu.unwrap();
    assert_eq!(
        cpu.some,
        PsiLine {
            avg10: 1.5,
            avg60: 0.75,
            avg300: 0.1,
            total_us: 123456
        }
    );
    assert_eq!(cpu.full.unwrap().total_us, 4567);
    assert_eq!(pressure.memory.unwrap().full.unwrap().total_us, 7);
    assert_eq!(pressure.io.unwrap().some.avg10, 3.0);
}

#[test]
fn a_dir_without_pressure_files_has_none() {
    let stats = read(&StatsDirs::V2 {
        dir: fixture("v2/cpu-only"),
    })
    .unwrap();
    assert_eq!((stats.pressure, stats.io), (None, None));
}

#[test]
fn pressure_without_full_or_with_garbage() {
    // cpu.pressure before Linux 5.13 has no full line.
    let some_only = pressure::parse("some avg10=0.10 avg60=0.20 avg300=0.30 total=5\n").unwrap();
    assert_eq!(some_only.some.total_us, 5);
    assert_eq!(some_only.full, None);
    assert_eq!(pressure::parse(""), None);
    assert_eq!(
        pressure::parse("some avg10=x avg60=0 avg300=0 total=1\n"),
        None
    );
    assert_eq!(pressure::parse("some avg10=0.00 total=1\n"), None);
}

#[test]
fn io_stat_skips_odd_lines_and_keys() {
    let io = block_io::parse_io_stat("garbage\n8:0 rbytes=5 newkey=9 wbytes=x rios=1\n");
    assert_eq!(
        io.devices,
        [DeviceIo {
            major: 8,
            minor: 0,
            read_bytes: 5,
            reads: 1,
            ..DeviceIo::default()
        }]
    );
}

#[test]
fn accumulate_adds_io_per_device_and_drops_pressure() {
    let one = full_v2();
    let mut sum = CgroupStats::default();
    sum.accumulate(&one);
    sum.accumulate(&CgroupStats {
        io: Some(block_io::parse_io_stat("8:0 rbytes=1\n")),
        ..CgroupStats::default()
    });
    sum.accumulate(&one);
    let io = sum.io.unwrap();
    assert_eq!(io.devices.len(), 2);
    assert_eq!(io.devices[0].write_bytes, 4 * MIB);
    assert_eq!(io.devices[1].read_bytes, 1);
    assert_eq!(sum.pressure, None);
}

#[test]
fn v1_cpu_split_throttling_and_settings() {
    let dirs = StatsDirs::V1 {
        cpuacct: Some(fixture("v1/cpuacct")),
        cpu: Some(fixture("v1/cpu")),
        memory: Some(fixture("v1/memory")),
        pids: Some(fixture("v1/pids")),
        blkio: None,
    };
    let stats = read(&dirs).unwrap();
    assert_eq!(
        stats.cpu_split,
        Some(CpuSplit {
            user_ns: 100_000_000,
            system_ns: 23_456_789
        })
    );
    assert_eq!(
        stats.throttling,
        Some(Throttling {
            periods: 120,
            throttled_periods: 30,
            throttled_ns: 4_500_000_000
        })
    );
    assert_eq!(
        stats.cpu_limits,
        Some(CpuLimits {
            period_us: 100_000,
            quota_us: Some(20_000),
            shares: 1024
        })
    );
    let memory = stats.memory_counters.unwrap();
    assert_eq!(memory.cache_bytes, 20 * MIB, "total_cache, not cache");
    assert_eq!(memory.mapped_file_bytes, MIB);
    assert_eq!(memory.kernel_bytes, Some(327_680));
    assert_eq!(memory.failcnt, 5);
    assert_eq!(memory.max_usage_bytes, Some(72 * MIB));
    assert_eq!(memory.oom_kills, Some(2));
    assert_eq!(
        (memory.own_page_faults, memory.own_major_page_faults),
        (100, 1)
    );
    assert_eq!(memory.reservation_bytes, None, "the unlimited soft limit");
    assert_eq!(memory.raw_swap_limit_bytes, Some(512 * MIB));
    assert_eq!(stats.pids_limit, Some(Some(32)));
}

#[test]
fn v1_unlimited_quota_is_none() {
    let dir = tempfile::tempdir().unwrap();
    for (name, value) in [
        ("cpu.cfs_period_us", "100000"),
        ("cpu.cfs_quota_us", "-1"),
        ("cpu.shares", "2"),
    ] {
        std::fs::write(dir.path().join(name), format!("{value}\n")).unwrap();
    }
    let limits = v1::cpu_limits(dir.path()).unwrap();
    assert_eq!(limits.quota_us, None);
    assert_eq!(limits.shares, 2);
}

#[test]
fn v2_cpu_split_throttling_and_settings() {
    let stats = full_v2();
    assert_eq!(
        stats.cpu_split,
        Some(CpuSplit {
            user_ns: 2_000_000_000,
            system_ns: 500_000_000
        })
    );
    assert_eq!(stats.throttling, Some(Throttling::default()));
    assert_eq!(
        stats.cpu_limits,
        Some(CpuLimits {
            period_us: 100_000,
            quota_us: Some(20_000),
            // cpu.weight 39 is what 1024 shares became.
            shares: 998
        })
    );
    let memory = stats.memory_counters.unwrap();
    assert_eq!(memory.cache_bytes, 20 * MIB);
    assert_eq!(memory.mapped_file_bytes, MIB);
    assert_eq!(memory.kernel_bytes, Some(1_118_208));
    assert_eq!(memory.failcnt, 3, "memory.events max");
    assert_eq!(memory.max_usage_bytes, Some(72 * MIB));
    assert_eq!(memory.oom_kills, Some(1));
    assert_eq!(memory.reservation_bytes, Some(8 * MIB));
    assert_eq!(memory.raw_swap_limit_bytes, None, "max");
    assert_eq!(stats.pids_limit, Some(None), "max is no limit");
    assert_eq!(
        procs(&StatsDirs::V2 {
            dir: fixture("v2/full")
        })
        .unwrap(),
        [1234, 1240]
    );
}

#[test]
fn v2_without_the_cpu_controller_has_no_throttling_or_settings() {
    let stats = read(&StatsDirs::V2 {
        dir: fixture("v2/cpu-only"),
    })
    .unwrap();
    assert!(stats.cpu_split.is_some());
    assert_eq!((stats.throttling, stats.cpu_limits), (None, None));
    assert_eq!(stats.memory_counters, None);
}

#[test]
fn weight_maps_back_to_shares() {
    assert_eq!(v2::weight_to_shares(1), 2);
    assert_eq!(v2::weight_to_shares(10_000), 262_144);
    assert_eq!(v2::weight_to_shares(100), 2597);
}
