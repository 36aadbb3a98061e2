//! Namespaced sysctls, written from inside the new namespaces so they apply
//! to the pod only.

use std::path::PathBuf;

use crate::PinError;

/// One `key=value` sysctl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    pub key: String,
    pub value: String,
}

/// Parses `net.ipv4.ip_forward=1`; keys may use `.` or `/` as separator.
pub fn parse(text: &str) -> Result<Sysctl, PinError> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| PinError::BadSysctl(format!("sysctl {text:?} is not key=value")))?;
    let key = key.trim();
    if key.is_empty()
        || key.starts_with(['.', '/'])
        || key
            .split(['.', '/'])
            .any(|part| part.is_empty() || part == "..")
    {
        return Err(PinError::BadSysctl(format!(
            "sysctl name {key:?} is invalid"
        )));
    }
    Ok(Sysctl {
        key: key.to_string(),
        value: value.to_string(),
    })
}

impl Sysctl {
    /// `/proc/sys/net/ipv4/ip_forward` for `net.ipv4.ip_forward`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/proc/sys").join(self.key.replace('.', "/"))
    }

    pub fn apply(&self) -> Result<(), PinError> {
        std::fs::write(self.path(), &self.value).map_err(|source| PinError::Sysctl {
            what: format!("sysctl {}={}", self.key, self.value),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_to_proc() {
        let sysctl = parse("net.ipv4.ip_unprivileged_port_start=0").unwrap();
        assert_eq!(
            sysctl.path(),
            PathBuf::from("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        );
        assert_eq!(sysctl.value, "0");
        assert_eq!(
            parse("kernel/shm_rmid_forced=1").unwrap().key,
            "kernel/shm_rmid_forced"
        );
    }

    #[test]
    fn rejects_escapes_and_garbage() {
        for bad in [
            "novalue",
            "=1",
            "../x=1",
            "net..x=1",
            "/etc/x=1",
            "net/../../x=1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
