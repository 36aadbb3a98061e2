//! The host's security modules, found once at start-up: whether the
//! kernel enforces AppArmor (and then berth's default profile, loaded
//! here with `apparmor_parser`) and whether it runs SELinux. What
//! containers get from them is decided in `berth_spec::lsm`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use berth_spec::lsm::{AppArmorHost, LsmHost, DEFAULT_APPARMOR_PROFILE};

/// The text of berth's default profile, with `@`-marked lines to fill.
const DEFAULT_PROFILE_TEMPLATE: &str = include_str!("lsm/berth-default.apparmor");

/// Where the system's profiles and their includes are.
const APPARMOR_DIR: &str = "/etc/apparmor.d";

/// Where `apparmor_parser` is looked for after `PATH` (containerd looks
/// only in /sbin).
const PARSER_DIRS: [&str; 2] = ["/usr/sbin", "/sbin"];

/// Finds the host's modules and loads berth's default AppArmor profile.
pub fn probe_and_load() -> LsmHost {
    let apparmor = if apparmor_enabled() {
        AppArmorHost::Enabled {
            default_profile: load_default_profile(),
        }
    } else {
        AppArmorHost::Disabled
    };
    match &apparmor {
        AppArmorHost::Disabled => tracing::info!(
            "AppArmor is not enabled in this kernel: explicit RuntimeDefault and Localhost \
             profiles will be refused"
        ),
        AppArmorHost::Enabled {
            default_profile: Ok(()),
        } => tracing::info!(
            profile = DEFAULT_APPARMOR_PROFILE,
            "AppArmor default profile loaded"
        ),
        AppArmorHost::Enabled {
            default_profile: Err(reason),
        } => tracing::error!(
            profile = DEFAULT_APPARMOR_PROFILE,
            %reason,
            "AppArmor default profile not loaded: RuntimeDefault requests will be refused and \
             containers that ask for no profile run unconfined"
        ),
    }
    LsmHost {
        apparmor,
        selinux: selinux_enabled(),
    }
}

/// Says in the log that a label `subject` asked for goes unapplied on a
/// host whose kernel runs no SELinux, where `berth_spec::lsm` accepts it as
/// containerd and CRI-O do: the operator sees it, it is not silent.
pub fn log_unapplied_selinux_label(
    lsm: &LsmHost,
    options: Option<&cri_api::v1::SeLinuxOption>,
    subject: &str,
) {
    if lsm.selinux {
        return;
    }
    if let Some(label) = berth_spec::lsm::selinux_label(options) {
        tracing::warn!(
            subject,
            %label,
            "SELinux label not applied: the kernel runs no SELinux"
        );
    }
}

/// runc's and containerd's test: the module parameter says Y and
/// securityfs shows AppArmor's directory.
fn apparmor_enabled() -> bool {
    let enabled = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|value| value.starts_with('Y'));
    enabled && Path::new("/sys/kernel/security/apparmor").is_dir()
}

/// selinuxfs is mounted (go-selinux's test) or securityfs lists SELinux.
fn selinux_enabled() -> bool {
    Path::new("/sys/fs/selinux/enforce").exists()
        || std::fs::read_to_string("/sys/kernel/security/lsm")
            .is_ok_and(|lsms| lsms.split(',').any(|lsm| lsm.trim() == "selinux"))
}

/// Loads (or replaces) [`DEFAULT_APPARMOR_PROFILE`]; the error says why it
/// could not be, for the messages of the requests that need it.
fn load_default_profile() -> Result<(), String> {
    let parser = find_parser().ok_or_else(|| {
        format!(
            "apparmor_parser was not found in PATH, {} or {}",
            PARSER_DIRS[0], PARSER_DIRS[1]
        )
    })?;
    let includes = Includes::of_host(Path::new(APPARMOR_DIR));
    let daemon_profile = std::fs::read_to_string("/proc/self/attr/current").unwrap_or_default();
    let text = render_default_profile(&includes, &daemon_profile);
    run_parser(&parser, &text).map_err(|err| format!("{}: {err}", parser.display()))?;
    let profiles = std::fs::read_to_string(berth_spec::host::APPARMOR_PROFILES)
        .map_err(|err| format!("{}: {err}", berth_spec::host::APPARMOR_PROFILES))?;
    if !berth_spec::lsm::profiles_list_has(&profiles, DEFAULT_APPARMOR_PROFILE) {
        return Err(format!(
            "{} succeeded but the kernel does not list the profile",
            parser.display()
        ));
    }
    Ok(())
}

fn find_parser() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(PARSER_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join("apparmor_parser"))
        .find(|candidate| candidate.is_file())
}

/// `apparmor_parser -K -r` (no cache, replace: a berthd restart loads the
/// profile of its own version) with the profile on stdin.
fn run_parser(parser: &Path, text: &str) -> Result<(), String> {
    let mut child = Command::new(parser)
        .args(["-K", "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| err.to_string())?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|err| format!("writing the profile: {err}"))?;
    }
    let output = child.wait_with_output().map_err(|err| err.to_string())?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!("{}: {}", output.status, stderr.trim()))
}

/// Which of the system's profile pieces exist (the template uses each only
/// when it does, as containerd's does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Includes {
    pub abi_3: bool,
    pub tunables_global: bool,
    pub abstractions_base: bool,
}

impl Includes {
    fn of_host(dir: &Path) -> Self {
        Self {
            abi_3: dir.join("abi/3.0").exists(),
            tunables_global: dir.join("tunables/global").exists(),
            abstractions_base: dir.join("abstractions/base").exists(),
        }
    }
}

/// The default profile's text. `daemon_profile` is berthd's own
/// `/proc/self/attr/current` (`unconfined`, or `<name> (<mode>)`).
pub fn render_default_profile(includes: &Includes, daemon_profile: &str) -> String {
    let abi = if includes.abi_3 { "abi <abi/3.0>," } else { "" };
    let imports = if includes.tunables_global {
        "#include <tunables/global>"
    } else {
        "@{PROC}=/proc/"
    };
    let inner = if includes.abstractions_base {
        "  #include <abstractions/base>"
    } else {
        ""
    };
    let daemon = daemon_profile_name(daemon_profile);
    DEFAULT_PROFILE_TEMPLATE
        .replace("@ABI@", abi)
        .replace("@IMPORTS@", imports)
        .replace("@INNER_IMPORTS@", inner)
        .replace("@DAEMON_PROFILE@", &quoted(&daemon))
}

/// The profile name in an `attr/current` value: `name (mode)` or a bare
/// name; empty means unconfined. Names may hold spaces: split at the last
/// " (".
fn daemon_profile_name(current: &str) -> String {
    let current = current.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    let name = current
        .rsplit_once(" (")
        .map_or(current, |(name, _mode)| name);
    if name.is_empty() {
        "unconfined".into()
    } else {
        name.into()
    }
}

/// A profile name as a rule's peer: in double quotes, which the parser
/// reads with spaces and most other characters; a quote or backslash in
/// it is not a name berthd's profile can have, and becomes unconfined.
fn quoted(name: &str) -> String {
    if name.contains(['"', '\\', '\n']) {
        return "unconfined".into();
    }
    format!("\"{name}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_uses_what_the_host_has() {
        let all = Includes {
            abi_3: true,
            tunables_global: true,
            abstractions_base: true,
        };
        let text = render_default_profile(&all, "unconfined\n");
        assert!(text.contains("abi <abi/3.0>,\n"));
        assert!(text.contains("#include <tunables/global>\n"));
        assert!(text.contains("  #include <abstractions/base>\n"));
        assert!(text.contains("signal (receive) peer=\"unconfined\","));
        assert!(
            text.contains("profile berth-default flags=(attach_disconnected,mediate_deleted) {")
        );

        let none = render_default_profile(&Includes::default(), "");
        assert!(none.contains("@{PROC}=/proc/\n"));
        assert!(!none.contains("#include"));
        for marker in ["@ABI@", "@IMPORTS@", "@INNER_IMPORTS@", "@DAEMON_PROFILE@"] {
            assert!(!none.contains(marker), "{marker} left in the profile");
            assert!(!text.contains(marker), "{marker} left in the profile");
        }
    }

    #[test]
    fn the_daemon_profile_is_the_name_without_its_mode() {
        assert_eq!(daemon_profile_name("unconfined\n"), "unconfined");
        assert_eq!(daemon_profile_name(""), "unconfined");
        assert_eq!(daemon_profile_name("berthd (enforce)\n"), "berthd");
        assert_eq!(daemon_profile_name("my daemon (complain)"), "my daemon");
        let text = render_default_profile(&Includes::default(), "my daemon (enforce)");
        assert!(text.contains("signal (receive) peer=\"my daemon\","));
        assert_eq!(quoted("a\"b"), "unconfined");
    }
}
