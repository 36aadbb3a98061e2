//! The signal StopContainer sends first: the config's `stop_signal`, else
//! the image's STOPSIGNAL, else SIGTERM.

use cri_api::v1::{ContainerConfig, Signal};

use crate::error::SpecError;
use crate::image::ImageConfigView;

/// glibc's SIGRTMIN (the kernel's is 32; glibc keeps two for itself), as
/// Docker and containerd number `RTMIN+n`.
const SIGRTMIN: i32 = 34;
const SIGRTMAX: i32 = 64;

/// Linux numbers of the classic signals (x86 and arm numbering).
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// The number of a signal written as `SIGTERM`, `TERM`, `sigterm`, `15`,
/// `SIGRTMIN+3`, `RTMAX-1`, or the CRI enum's `SIGRTMINPLUS3` spelling.
pub fn parse_signal(text: &str) -> Option<i32> {
    let upper = text.trim().to_ascii_uppercase();
    if let Ok(number) = upper.parse::<i32>() {
        return (1..=SIGRTMAX).contains(&number).then_some(number);
    }
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let name = name.replace("PLUS", "+").replace("MINUS", "-");
    if let Some(number) = SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, number)| *number)
    {
        return Some(number);
    }
    let realtime = |base: i32, rest: &str| -> Option<i32> {
        let number = match rest {
            "" => base,
            _ => {
                let (sign, offset) = rest.split_at(1);
                let offset: i32 = offset.parse().ok()?;
                if sign == "+" {
                    base + offset
                } else if sign == "-" {
                    base - offset
                } else {
                    return None;
                }
            }
        };
        (SIGRTMIN..=SIGRTMAX).contains(&number).then_some(number)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return realtime(SIGRTMIN, rest);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return realtime(SIGRTMAX, rest);
    }
    None
}

/// The stop signal of a container (see the module docs). An image signal
/// berth cannot read is an error naming it, not a silent SIGTERM.
pub fn stop_signal(config: &ContainerConfig, image: &ImageConfigView) -> Result<i32, SpecError> {
    match Signal::try_from(config.stop_signal) {
        Ok(Signal::RuntimeDefault) | Err(_) => {}
        Ok(signal) => {
            // The enum's names are `SIGNAL_SIGTERM` since cri-api v0.37.
            let name = signal.as_str_name();
            return parse_signal(name.strip_prefix("SIGNAL_").unwrap_or(name))
                .ok_or_else(|| SpecError::UnknownSignal(name.to_string()));
        }
    }
    if image.stop_signal.is_empty() {
        return Ok(15);
    }
    parse_signal(&image.stop_signal)
        .ok_or_else(|| SpecError::UnknownSignal(image.stop_signal.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_parse() {
        for (text, number) in [
            ("SIGTERM", 15),
            ("term", 15),
            ("15", 15),
            ("SIGKILL", 9),
            ("SIGQUIT", 3),
            ("SIGRTMIN", 34),
            ("SIGRTMIN+3", 37),
            ("RTMAX-1", 63),
            ("SIGRTMAX", 64),
            ("SIGRTMINPLUS1", 35),
            ("SIGRTMAXMINUS14", 50),
            ("SIGCLD", 17),
        ] {
            assert_eq!(parse_signal(text), Some(number), "{text}");
        }
        for bad in ["", "SIGFOO", "0", "65", "RTMIN+40", "RTMIN*2", "-3"] {
            assert_eq!(parse_signal(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_cri_signal_has_a_number() {
        for value in 1..=65 {
            let signal = Signal::try_from(value).unwrap();
            let config = ContainerConfig {
                stop_signal: value,
                ..Default::default()
            };
            assert!(
                stop_signal(&config, &ImageConfigView::default()).is_ok(),
                "{}",
                signal.as_str_name()
            );
        }
        let config = ContainerConfig {
            stop_signal: Signal::Sigrtminplus3 as i32,
            ..Default::default()
        };
        assert_eq!(
            stop_signal(&config, &ImageConfigView::default()).unwrap(),
            SIGRTMIN + 3
        );
    }

    #[test]
    fn config_then_image_then_sigterm() {
        let image = ImageConfigView {
            stop_signal: "SIGQUIT".into(),
            ..Default::default()
        };
        let mut config = ContainerConfig::default();
        assert_eq!(
            stop_signal(&config, &ImageConfigView::default()).unwrap(),
            15
        );
        assert_eq!(stop_signal(&config, &image).unwrap(), 3);
        config.stop_signal = Signal::Sigusr1 as i32;
        assert_eq!(stop_signal(&config, &image).unwrap(), 10);
    }

    #[test]
    fn unreadable_image_signal_is_an_error() {
        let image = ImageConfigView {
            stop_signal: "SIGNOPE".into(),
            ..Default::default()
        };
        let err = stop_signal(&ContainerConfig::default(), &image).unwrap_err();
        assert!(matches!(err, SpecError::UnknownSignal(s) if s == "SIGNOPE"));
    }
}
