//! Default rlimits for containers, written as CRI-O's `default_ulimits`
//! (`"nofile=1048576:1048576"`, `"core=unlimited"`). CRI has no per-container
//! rlimits: a container whose spec carries none gets these, and without
//! any it inherits the shim's (berthd's) limits.

use oci_spec::runtime::{PosixRlimit, PosixRlimitBuilder, PosixRlimitType, Spec};

/// The value the kernel reads as "no limit" (RLIM_INFINITY).
const UNLIMITED: u64 = u64::MAX;

/// The resource names accepted, as `ulimit`/CRI-O spell them.
const NAMES: [(&str, PosixRlimitType); 16] = [
    ("as", PosixRlimitType::RlimitAs),
    ("core", PosixRlimitType::RlimitCore),
    ("cpu", PosixRlimitType::RlimitCpu),
    ("data", PosixRlimitType::RlimitData),
    ("fsize", PosixRlimitType::RlimitFsize),
    ("locks", PosixRlimitType::RlimitLocks),
    ("memlock", PosixRlimitType::RlimitMemlock),
    ("msgqueue", PosixRlimitType::RlimitMsgqueue),
    ("nice", PosixRlimitType::RlimitNice),
    ("nofile", PosixRlimitType::RlimitNofile),
    ("nproc", PosixRlimitType::RlimitNproc),
    ("rss", PosixRlimitType::RlimitRss),
    ("rtprio", PosixRlimitType::RlimitRtprio),
    ("rttime", PosixRlimitType::RlimitRttime),
    ("sigpending", PosixRlimitType::RlimitSigpending),
    ("stack", PosixRlimitType::RlimitStack),
];

/// Parses `name=soft:hard` or `name=value` (soft and hard the same); a
/// value is a number, `unlimited` or `-1`. The error says what is wrong
/// and what is allowed.
pub fn parse(entry: &str) -> Result<PosixRlimit, String> {
    let (name, values) = entry.split_once('=').ok_or_else(|| {
        format!("{entry:?} is not name=soft:hard (e.g. \"nofile=1048576:1048576\")")
    })?;
    let name = name.trim();
    let typ = NAMES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, typ)| *typ)
        .ok_or_else(|| {
            let known: Vec<&str> = NAMES.iter().map(|(known, _)| *known).collect();
            format!(
                "{entry:?} names no resource; allowed are {}",
                known.join(", ")
            )
        })?;
    let (soft, hard) = match values.split_once(':') {
        Some((soft, hard)) => (value(entry, soft)?, value(entry, hard)?),
        None => {
            let both = value(entry, values)?;
            (both, both)
        }
    };
    if soft > hard {
        return Err(format!("{entry:?}: the soft limit is above the hard limit"));
    }
    PosixRlimitBuilder::default()
        .typ(typ)
        .soft(soft)
        .hard(hard)
        .build()
        .map_err(|err| format!("{entry:?}: {err}"))
}

fn value(entry: &str, text: &str) -> Result<u64, String> {
    match text.trim() {
        "unlimited" | "-1" => Ok(UNLIMITED),
        number => number
            .parse()
            .map_err(|_| format!("{entry:?}: {number:?} is not a number, \"unlimited\" or -1")),
    }
}

/// Parses every entry; a resource named twice is an error, as two values
/// for one limit cannot both hold.
pub fn parse_all(entries: &[String]) -> Result<Vec<PosixRlimit>, String> {
    let mut rlimits: Vec<PosixRlimit> = Vec::with_capacity(entries.len());
    for entry in entries {
        let rlimit = parse(entry)?;
        if rlimits.iter().any(|known| known.typ() == rlimit.typ()) {
            return Err(format!("{entry:?} sets a resource an earlier entry set"));
        }
        rlimits.push(rlimit);
    }
    Ok(rlimits)
}

/// Gives `spec`'s process the defaults when it has no rlimits of its own.
pub fn apply_defaults(spec: &mut Spec, defaults: &[PosixRlimit]) {
    if defaults.is_empty() {
        return;
    }
    if let Some(process) = spec.process_mut() {
        if process.rlimits().as_ref().is_none_or(|own| own.is_empty()) {
            process.set_rlimits(Some(defaults.to_vec()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_hard_single_and_unlimited_values() {
        let nofile = parse("nofile=1024:1048576").unwrap();
        assert_eq!(nofile.typ(), PosixRlimitType::RlimitNofile);
        assert_eq!((nofile.soft(), nofile.hard()), (1024, 1_048_576));
        let nproc = parse("nproc=4096").unwrap();
        assert_eq!((nproc.soft(), nproc.hard()), (4096, 4096));
        let core = parse("core=unlimited:-1").unwrap();
        assert_eq!((core.soft(), core.hard()), (UNLIMITED, UNLIMITED));
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        assert!(parse("nofile").unwrap_err().contains("name=soft:hard"));
        let err = parse("files=10").unwrap_err();
        assert!(
            err.contains("names no resource") && err.contains("nofile"),
            "{err}"
        );
        assert!(parse("nofile=lots").unwrap_err().contains("not a number"));
        assert!(parse("nofile=10:5")
            .unwrap_err()
            .contains("soft limit is above"));
        let twice = parse_all(&["nofile=1".into(), "nofile=2".into()]).unwrap_err();
        assert!(twice.contains("earlier entry"), "{twice}");
    }

    #[test]
    fn defaults_fill_only_a_process_without_rlimits() {
        let defaults = parse_all(&["nofile=100:200".into()]).unwrap();
        let mut spec = Spec::default();
        if let Some(process) = spec.process_mut() {
            process.set_rlimits(None);
        }
        apply_defaults(&mut spec, &defaults);
        let rlimits = spec.process().as_ref().unwrap().rlimits().clone().unwrap();
        assert_eq!(rlimits, defaults);

        let own = parse_all(&["core=0".into()]).unwrap();
        if let Some(process) = spec.process_mut() {
            process.set_rlimits(Some(own.clone()));
        }
        apply_defaults(&mut spec, &defaults);
        assert_eq!(
            spec.process().as_ref().unwrap().rlimits().clone().unwrap(),
            own
        );
    }
}
