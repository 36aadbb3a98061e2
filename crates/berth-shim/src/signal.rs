//! Signal names and numbers (pure).

use std::str::FromStr;

use nix::sys::signal::Signal;

use berth_shim_api::protocol::SignalArg;

/// The largest signal number on Linux (SIGRTMAX).
const MAX_SIGNAL: i32 = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid signal {0:?}")]
pub struct InvalidSignal(pub String);

/// Resolves `15`, `"15"`, `"TERM"`, `"SIGTERM"` (any case) to a signal
/// number in 1..=64. Real-time signals are accepted by number only.
pub fn signal_number(arg: &SignalArg) -> Result<i32, InvalidSignal> {
    match arg {
        SignalArg::Number(n) => check_range(*n).ok_or_else(|| InvalidSignal(n.to_string())),
        SignalArg::Name(name) => parse_name(name).ok_or_else(|| InvalidSignal(name.clone())),
    }
}

fn check_range(n: i32) -> Option<i32> {
    (1..=MAX_SIGNAL).contains(&n).then_some(n)
}

fn parse_name(name: &str) -> Option<i32> {
    let upper = name.trim().to_ascii_uppercase();
    if let Ok(n) = upper.parse::<i32>() {
        return check_range(n);
    }
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    Signal::from_str(&full).ok().map(|s| s as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Result<i32, InvalidSignal> {
        signal_number(&SignalArg::Name(s.into()))
    }

    #[test]
    fn names_and_numbers() {
        assert_eq!(name("SIGTERM"), Ok(15));
        assert_eq!(name("term"), Ok(15));
        assert_eq!(name("SIGKILL"), Ok(9));
        assert_eq!(name("9"), Ok(9));
        assert_eq!(name("SIGRTMIN"), Err(InvalidSignal("SIGRTMIN".into())));
        assert_eq!(signal_number(&SignalArg::Number(34)), Ok(34));
        assert!(signal_number(&SignalArg::Number(0)).is_err());
        assert!(signal_number(&SignalArg::Number(65)).is_err());
        assert!(name("SIGNOPE").is_err());
        assert!(name("").is_err());
    }
}
