//! Block IO per device: cgroup v2's `io.stat` and cgroup v1's blkio
//! `blkio.throttle.io_service_bytes_recursive` and
//! `blkio.throttle.io_serviced_recursive`.

use std::path::Path;

use super::{read_file, StatsError};

/// Bytes and operations one cgroup did on one block device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceIo {
    pub major: u64,
    pub minor: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub writes: u64,
}

/// A cgroup's IO, one entry per device it touched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoStats {
    pub devices: Vec<DeviceIo>,
}

impl IoStats {
    /// Adds `other`'s counters device by device.
    pub fn accumulate(&mut self, other: &IoStats) {
        for device in &other.devices {
            let sum = self.device(device.major, device.minor);
            sum.read_bytes += device.read_bytes;
            sum.write_bytes += device.write_bytes;
            sum.reads += device.reads;
            sum.writes += device.writes;
        }
    }

    /// The entry of device `major:minor`, added when missing.
    fn device(&mut self, major: u64, minor: u64) -> &mut DeviceIo {
        let index = match self
            .devices
            .iter()
            .position(|d| (d.major, d.minor) == (major, minor))
        {
            Some(index) => index,
            None => {
                self.devices.push(DeviceIo {
                    major,
                    minor,
                    ..DeviceIo::default()
                });
                self.devices.len() - 1
            }
        };
        &mut self.devices[index]
    }
}

/// IO from a cgroup v2 dir's `io.stat` (present with the io controller).
pub fn v2(dir: &Path) -> Result<IoStats, StatsError> {
    Ok(parse_io_stat(&read_file(&dir.join("io.stat"))?))
}

/// IO from a cgroup v1 blkio dir.
pub fn v1(dir: &Path) -> Result<IoStats, StatsError> {
    let bytes = read_file(&dir.join("blkio.throttle.io_service_bytes_recursive"))?;
    let ops = read_file(&dir.join("blkio.throttle.io_serviced_recursive"))?;
    Ok(parse_blkio(&bytes, &ops))
}

/// Parses v2 `io.stat`: one line per device,
/// `8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0`. Lines without a
/// `major:minor` are skipped; keys the kernel adds later are ignored.
pub fn parse_io_stat(text: &str) -> IoStats {
    let mut stats = IoStats::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some((major, minor)) = fields.next().and_then(device_numbers) else {
            continue;
        };
        let device = stats.device(major, minor);
        for field in fields {
            let Some((key, value)) = field.split_once('=') else {
                continue;
            };
            let Ok(value) = value.parse::<u64>() else {
                continue;
            };
            match key {
                "rbytes" => device.read_bytes = value,
                "wbytes" => device.write_bytes = value,
                "rios" => device.reads = value,
                "wios" => device.writes = value,
                _ => {}
            }
        }
    }
    stats
}

/// Parses v1's two blkio files, both `8:0 Read 4096` lines per device and
/// operation, and a last `Total` line that is skipped.
pub fn parse_blkio(bytes: &str, ops: &str) -> IoStats {
    let mut stats = IoStats::default();
    for (text, is_bytes) in [(bytes, true), (ops, false)] {
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some((major, minor)) = fields.next().and_then(device_numbers) else {
                continue;
            };
            let (Some(op), Some(Ok(value))) = (fields.next(), fields.next().map(str::parse)) else {
                continue;
            };
            let device = stats.device(major, minor);
            match (op, is_bytes) {
                ("Read", true) => device.read_bytes = value,
                ("Write", true) => device.write_bytes = value,
                ("Read", false) => device.reads = value,
                ("Write", false) => device.writes = value,
                _ => {}
            }
        }
    }
    stats
}

/// `8:0` as (8, 0).
fn device_numbers(field: &str) -> Option<(u64, u64)> {
    let (major, minor) = field.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}
