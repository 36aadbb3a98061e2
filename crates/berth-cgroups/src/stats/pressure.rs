//! Pressure stall information (PSI): `cpu.pressure`, `memory.pressure` and
//! `io.pressure` in a cgroup v2 dir (Linux 4.20; per cgroup since 5.2).
//!
//! Pressure is read best-effort: a kernel without PSI (or booted with
//! `psi=0`, where reading fails with EOPNOTSUPP) has none, and that must not
//! cost the cgroup its other stats.

use std::path::Path;

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    /// Percent of time stalled over the last 10, 60 and 300 seconds.
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    /// Total stall time, in microseconds.
    pub total_us: u64,
}

/// One resource's pressure: `some` (at least one task stalled) and `full`
/// (all non-idle tasks stalled at once; absent for cpu before Linux 5.13).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

/// The pressure of each resource, where the kernel has it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PressureStats {
    pub cpu: Option<Pressure>,
    pub memory: Option<Pressure>,
    pub io: Option<Pressure>,
}

impl PressureStats {
    /// True when no resource has pressure numbers.
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none() && self.io.is_none()
    }
}

/// Reads the three pressure files of the cgroup v2 dir `dir`; `None` when
/// none of them can be read.
pub fn read(dir: &Path) -> Option<PressureStats> {
    let file = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|text| parse(&text))
    };
    let stats = PressureStats {
        cpu: file("cpu.pressure"),
        memory: file("memory.pressure"),
        io: file("io.pressure"),
    };
    (!stats.is_empty()).then_some(stats)
}

/// Parses a pressure file:
/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=0`, then a `full` line.
/// `None` without a well-formed `some` line; a malformed `full` line is no
/// `full`.
pub fn parse(text: &str) -> Option<Pressure> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("some") => some = parse_line(fields),
            Some("full") => full = parse_line(fields),
            _ => {}
        }
    }
    Some(Pressure { some: some?, full })
}

/// The `key=value` fields after a line's `some`/`full`; every one of the
/// four must be there.
fn parse_line<'a>(fields: impl Iterator<Item = &'a str>) -> Option<PsiLine> {
    let (mut avg10, mut avg60, mut avg300, mut total) = (None, None, None, None);
    for field in fields {
        let (key, value) = field.split_once('=')?;
        match key {
            "avg10" => avg10 = value.parse().ok(),
            "avg60" => avg60 = value.parse().ok(),
            "avg300" => avg300 = value.parse().ok(),
            "total" => total = value.parse().ok(),
            _ => {}
        }
    }
    Some(PsiLine {
        avg10: avg10?,
        avg60: avg60?,
        avg300: avg300?,
        total_us: total?,
    })
}
