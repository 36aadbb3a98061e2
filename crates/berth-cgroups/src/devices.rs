//! The device policy of a container: which device nodes it may read, write
//! and make, and how that policy is put into each kind of cgroup.
//!
//! The effective policy is runc's: deny everything, then the spec's rules
//! (berth's specs start with `deny a` and allow the CRI's devices, or allow
//! everything for a privileged container), then runc's default allow list.
//! libcgroups' own defaults also allow `/dev/console` (`c 5:1 rwm`), which
//! runc's do not; berth enforces this policy after libcontainer's, so the
//! console stays closed:
//!
//! - cgroup v2: an eBPF `BPF_PROG_TYPE_CGROUP_DEVICE` program attached with
//!   `BPF_F_ALLOW_MULTI` next to any program already there (libcontainer's,
//!   systemd's). The kernel asks every attached program and allows an access
//!   only if all of them do, so the result is never wider than this policy.
//! - cgroup v1: the container's `devices.deny`/`devices.allow` rewritten to
//!   this policy.
//! - systemd scopes: `DevicePolicy=` and `DeviceAllow=` as close to the
//!   policy as systemd can say, never narrower (a narrower systemd list would
//!   break devices the container was given); the eBPF program holds the
//!   exact rules, and systemd keeps its properties across a daemon-reload.
//!
//! Everything here is pure; [`crate::CgroupManager::restrict_devices`] does
//! the writes.

use libcgroups::v2::devices::emulator::Emulator;
use libcgroups::v2::devices::program::{Program, ProgramError};
use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

use crate::systemd::UnitProperty;

/// A device rule berth cannot enforce.
#[derive(thiserror::Error, Debug)]
pub enum DeviceRuleError {
    /// Only char (`c`), block (`b`) and all (`a`) rules exist in a device
    /// cgroup.
    #[error("device rule {rule}: type {kind:?} has no device cgroup rule")]
    Type { rule: String, kind: LinuxDeviceType },
    /// Access is letters of `rwm`.
    #[error("device rule {rule}: access {access:?} is not letters of \"rwm\"")]
    Access { rule: String, access: String },
    /// The eBPF program could not be generated from the rules.
    #[error("generating the device filter program: {0}")]
    Program(#[from] ProgramError),
}

/// The device policy of one container, simplified as the kernel's v1
/// controller keeps it: a default, and the rules that differ from it in the
/// order they were given (a later rule wins over an earlier one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePolicy {
    default_allow: bool,
    rules: Vec<LinuxDeviceCgroup>,
}

/// What an access asks for, as the kernel checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Char,
    Block,
}

fn rule(
    kind: LinuxDeviceType,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut rule = LinuxDeviceCgroup::default();
    rule.set_allow(true)
        .set_typ(Some(kind))
        .set_major(major)
        .set_minor(minor)
        .set_access(Some(access.to_string()));
    rule
}

/// runc's default allow list (`libcontainer/specconv`'s `AllowedDevices`):
/// making any node, the pseudo devices, ttys and tun. No `/dev/console`.
pub fn default_allowed() -> Vec<LinuxDeviceCgroup> {
    use LinuxDeviceType::{B, C};
    vec![
        rule(C, None, None, "m"),
        rule(B, None, None, "m"),
        rule(C, Some(1), Some(3), "rwm"),    // null
        rule(C, Some(1), Some(5), "rwm"),    // zero
        rule(C, Some(1), Some(7), "rwm"),    // full
        rule(C, Some(1), Some(8), "rwm"),    // random
        rule(C, Some(1), Some(9), "rwm"),    // urandom
        rule(C, Some(5), Some(0), "rwm"),    // tty
        rule(C, Some(5), Some(2), "rwm"),    // ptmx
        rule(C, Some(136), None, "rwm"),     // pts
        rule(C, Some(10), Some(200), "rwm"), // tun (TUNSETIFF needs CAP_NET_ADMIN)
    ]
}

impl DevicePolicy {
    /// The policy of a container whose spec has `spec_rules`
    /// (`linux.resources.devices`): everything denied, then the spec's
    /// rules, then [`default_allowed`], as runc builds it.
    pub fn for_container(spec_rules: &[LinuxDeviceCgroup]) -> Result<Self, DeviceRuleError> {
        let mut emulator = Emulator::with_default_allow(false);
        for rule in spec_rules.iter().chain(default_allowed().iter()) {
            check(rule)?;
            emulator.add_rule(rule);
        }
        Ok(Self {
            default_allow: emulator.default_allow,
            rules: emulator.rules,
        })
    }

    /// Whether the policy allows `access` (letters of `rwm`) to the device
    /// `major:minor`: the last rule that matches the device and covers the
    /// whole access decides, else the default. The eBPF program decides
    /// the same way.
    pub fn allows(&self, kind: DeviceKind, major: i64, minor: i64, access: &str) -> bool {
        let wanted = LinuxDeviceType::from(kind);
        self.rules
            .iter()
            .rev()
            .find(|rule| {
                rule.typ().unwrap_or_default() == wanted
                    && rule.major().is_none_or(|m| m < 0 || m == major)
                    && rule.minor().is_none_or(|m| m < 0 || m == minor)
                    && access
                        .chars()
                        .all(|c| rule.access().as_deref().unwrap_or("").contains(c))
            })
            .map_or(self.default_allow, LinuxDeviceCgroup::allow)
    }

    /// The `BPF_PROG_TYPE_CGROUP_DEVICE` program enforcing the policy.
    pub fn bpf_program(&self) -> Result<Program, DeviceRuleError> {
        Ok(Program::from_rules(&self.rules, self.default_allow)?)
    }

    /// The writes that turn a v1 devices cgroup into this policy, in order:
    /// (`"devices.deny"` or `"devices.allow"`, line). The first resets the
    /// cgroup to the default (`a`), which also drops every exception
    /// libcontainer wrote.
    pub fn v1_writes(&self) -> Vec<(&'static str, String)> {
        let file = |allow: bool| {
            if allow {
                "devices.allow"
            } else {
                "devices.deny"
            }
        };
        let mut writes = vec![(file(self.default_allow), "a".to_string())];
        writes.extend(
            self.rules
                .iter()
                .map(|rule| (file(rule.allow()), v1_line(rule))),
        );
        writes
    }

    /// `DevicePolicy=` and `DeviceAllow=` for a systemd unit: `strict` and
    /// the allowed devices when the policy denies by default; `auto` with
    /// no list (systemd filters nothing) when it allows by default, which
    /// systemd cannot combine with exceptions. Rules systemd cannot name
    /// exactly are widened, so that only the eBPF program narrows them.
    pub fn systemd_properties(&self) -> Vec<UnitProperty> {
        if self.default_allow {
            return vec![
                UnitProperty::Str("DevicePolicy", "auto".into()),
                UnitProperty::DeviceAllow(Vec::new()),
            ];
        }
        let mut allow: Vec<(String, String)> = Vec::new();
        for rule in self.rules.iter().filter(|r| r.allow()) {
            let entry = (
                systemd_device(rule),
                rule.access().clone().unwrap_or_default(),
            );
            if !allow.contains(&entry) {
                allow.push(entry);
            }
        }
        vec![
            UnitProperty::Str("DevicePolicy", "strict".into()),
            UnitProperty::DeviceAllow(allow),
        ]
    }
}

impl From<DeviceKind> for LinuxDeviceType {
    fn from(kind: DeviceKind) -> Self {
        match kind {
            DeviceKind::Char => LinuxDeviceType::C,
            DeviceKind::Block => LinuxDeviceType::B,
        }
    }
}

/// Refuses what neither the v1 controller nor the eBPF program can hold.
fn check(rule: &LinuxDeviceCgroup) -> Result<(), DeviceRuleError> {
    let kind = rule.typ().unwrap_or_default();
    if !matches!(
        kind,
        LinuxDeviceType::A | LinuxDeviceType::B | LinuxDeviceType::C
    ) {
        return Err(DeviceRuleError::Type {
            rule: v1_line(rule),
            kind,
        });
    }
    let access = rule.access().clone().unwrap_or_default();
    if !access.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        return Err(DeviceRuleError::Access {
            rule: v1_line(rule),
            access,
        });
    }
    Ok(())
}

fn number(n: Option<i64>) -> String {
    match n {
        Some(n) if n >= 0 => n.to_string(),
        _ => "*".to_string(),
    }
}

fn type_letter(rule: &LinuxDeviceCgroup) -> &'static str {
    match rule.typ().unwrap_or_default() {
        LinuxDeviceType::B => "b",
        LinuxDeviceType::C => "c",
        _ => "a",
    }
}

/// The kernel's v1 rule syntax: `c 1:3 rwm`, `b *:* m`.
fn v1_line(rule: &LinuxDeviceCgroup) -> String {
    format!(
        "{} {}:{} {}",
        type_letter(rule),
        number(rule.major()),
        number(rule.minor()),
        rule.access().as_deref().unwrap_or("")
    )
}

/// systemd's name for the devices of a rule (runc's conversion, for systemd
/// 240 and later): `/dev/char/1:3` for one device, `char-136` for a major,
/// `char-*` for all. A rule for one minor of every major has no name: all
/// of the type stands for it.
fn systemd_device(rule: &LinuxDeviceCgroup) -> String {
    let prefix = if type_letter(rule) == "b" {
        "block"
    } else {
        "char"
    };
    let major = rule.major().filter(|m| *m >= 0);
    let minor = rule.minor().filter(|m| *m >= 0);
    match (major, minor) {
        (Some(major), Some(minor)) => format!("/dev/{prefix}/{major}:{minor}"),
        (Some(major), None) => format!("{prefix}-{major}"),
        (None, _) => format!("{prefix}-*"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeviceKind::{Block, Char};

    fn spec_rule(
        allow: bool,
        kind: LinuxDeviceType,
        mm: Option<(i64, i64)>,
        access: &str,
    ) -> LinuxDeviceCgroup {
        let mut rule = LinuxDeviceCgroup::default();
        rule.set_allow(allow)
            .set_typ(Some(kind))
            .set_major(mm.map(|m| m.0))
            .set_minor(mm.map(|m| m.1))
            .set_access(Some(access.into()));
        rule
    }

    /// What berth-spec writes: deny all, then the CRI's devices.
    fn default_spec(given: &[LinuxDeviceCgroup]) -> Vec<LinuxDeviceCgroup> {
        let mut rules = vec![spec_rule(false, LinuxDeviceType::A, None, "rwm")];
        rules.extend_from_slice(given);
        rules
    }

    /// The policy and its eBPF program agree on `access` to `kind major:minor`.
    fn decide(
        policy: &DevicePolicy,
        kind: DeviceKind,
        major: u32,
        minor: u32,
        access: &str,
    ) -> bool {
        let by_rules = policy.allows(kind, major.into(), minor.into(), access);
        let program = policy.bpf_program().unwrap();
        let by_program = program
            .execute(kind.into(), major, minor, access.to_string())
            .unwrap()
            == 1;
        assert_eq!(by_rules, by_program, "{kind:?} {major}:{minor} {access}");
        by_rules
    }

    #[test]
    fn a_default_container_gets_runc_defaults_and_no_console() {
        let policy = DevicePolicy::for_container(&default_spec(&[])).unwrap();
        for (major, minor) in [
            (1, 3),
            (1, 5),
            (1, 7),
            (1, 8),
            (1, 9),
            (5, 0),
            (5, 2),
            (136, 4),
            (10, 200),
        ] {
            assert!(decide(&policy, Char, major, minor, "rw"), "{major}:{minor}");
        }
        // The console, kmsg, mem, the host's disk: mknod yes, open no.
        for (kind, major, minor) in [
            (Char, 5, 1),
            (Char, 1, 11),
            (Char, 1, 1),
            (Block, 254, 0),
            (Block, 8, 0),
        ] {
            assert!(!decide(&policy, kind, major, minor, "r"), "{major}:{minor}");
            assert!(!decide(&policy, kind, major, minor, "w"), "{major}:{minor}");
            assert!(decide(&policy, kind, major, minor, "m"), "{major}:{minor}");
        }
    }

    #[test]
    fn a_given_device_is_allowed_with_its_permissions_only() {
        let disk = spec_rule(true, LinuxDeviceType::B, Some((254, 0)), "r");
        let policy = DevicePolicy::for_container(&default_spec(&[disk])).unwrap();
        assert!(decide(&policy, Block, 254, 0, "r"));
        assert!(!decide(&policy, Block, 254, 0, "w"));
        assert!(!decide(&policy, Block, 254, 0, "rw"));
        assert!(!decide(&policy, Block, 254, 1, "r"));
    }

    #[test]
    fn the_console_is_allowed_when_given() {
        let console = spec_rule(true, LinuxDeviceType::C, Some((5, 1)), "rw");
        let policy = DevicePolicy::for_container(&default_spec(&[console])).unwrap();
        assert!(decide(&policy, Char, 5, 1, "rw"));
    }

    #[test]
    fn privileged_allows_everything() {
        let all = spec_rule(true, LinuxDeviceType::A, None, "rwm");
        let policy = DevicePolicy::for_container(&[all]).unwrap();
        assert!(decide(&policy, Block, 254, 0, "rw"));
        assert!(decide(&policy, Char, 5, 1, "rw"));
        assert_eq!(policy.v1_writes()[0], ("devices.allow", "a".to_string()));
    }

    #[test]
    fn a_spec_without_rules_still_denies_by_default() {
        let policy = DevicePolicy::for_container(&[]).unwrap();
        assert!(!decide(&policy, Block, 8, 0, "r"));
        assert!(decide(&policy, Char, 1, 3, "rw"));
    }

    #[test]
    fn rules_the_cgroup_cannot_hold_are_refused() {
        let pipe = spec_rule(true, LinuxDeviceType::P, None, "rw");
        assert!(matches!(
            DevicePolicy::for_container(&[pipe]),
            Err(DeviceRuleError::Type { .. })
        ));
        let bad = spec_rule(true, LinuxDeviceType::C, Some((1, 3)), "rwx");
        assert!(matches!(
            DevicePolicy::for_container(&[bad]),
            Err(DeviceRuleError::Access { .. })
        ));
    }

    #[test]
    fn v1_writes_reset_then_allow_in_order() {
        let disk = spec_rule(true, LinuxDeviceType::B, Some((254, 0)), "r");
        let policy = DevicePolicy::for_container(&default_spec(&[disk])).unwrap();
        let writes = policy.v1_writes();
        assert_eq!(writes[0], ("devices.deny", "a".to_string()));
        assert_eq!(writes[1], ("devices.allow", "b 254:0 r".to_string()));
        assert_eq!(writes[2], ("devices.allow", "c *:* m".to_string()));
        assert!(writes.contains(&("devices.allow", "c 136:* rwm".to_string())));
        assert!(!writes.iter().any(|(_, line)| line.starts_with("c 5:1")));
    }

    #[test]
    fn systemd_gets_strict_and_runc_style_names() {
        let disk = spec_rule(true, LinuxDeviceType::B, Some((254, 0)), "r");
        let policy = DevicePolicy::for_container(&default_spec(&[disk])).unwrap();
        let props = policy.systemd_properties();
        assert_eq!(props[0], UnitProperty::Str("DevicePolicy", "strict".into()));
        let UnitProperty::DeviceAllow(allow) = &props[1] else {
            panic!("no DeviceAllow: {props:?}");
        };
        let has =
            |path: &str, access: &str| allow.contains(&(path.to_string(), access.to_string()));
        assert!(has("/dev/block/254:0", "r"));
        assert!(has("char-*", "m"));
        assert!(has("block-*", "m"));
        assert!(has("/dev/char/1:3", "rwm"));
        assert!(has("char-136", "rwm"));
        assert!(!allow.iter().any(|(path, _)| path == "/dev/char/5:1"));
    }

    #[test]
    fn systemd_filters_nothing_for_a_privileged_container() {
        let all = spec_rule(true, LinuxDeviceType::A, None, "rwm");
        let policy = DevicePolicy::for_container(&[all]).unwrap();
        assert_eq!(
            policy.systemd_properties(),
            vec![
                UnitProperty::Str("DevicePolicy", "auto".into()),
                UnitProperty::DeviceAllow(Vec::new())
            ]
        );
    }
}
