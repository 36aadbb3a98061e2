//! Log set-up: the filter comes from `--log-level`, else `RUST_LOG`, else
//! the config's `log_level`.

use tracing_subscriber::EnvFilter;

use crate::config::LogLevel;

/// Builds the filter by that precedence; a bad filter names its source.
pub fn filter(flag: Option<&str>, configured: LogLevel) -> Result<EnvFilter, String> {
    if let Some(flag) = flag {
        return EnvFilter::try_new(expand_bare_level(flag))
            .map_err(|err| format!("invalid --log-level {flag:?}: {err}"));
    }
    match std::env::var("RUST_LOG") {
        Ok(env) if !env.is_empty() => EnvFilter::try_new(expand_bare_level(&env))
            .map_err(|err| format!("invalid RUST_LOG {env:?}: {err}")),
        _ => Ok(EnvFilter::new(expand_bare_level(configured.as_str()))),
    }
}

/// Libraries of the gRPC stack log every HTTP/2 frame at debug. A bare
/// level (`debug`) is meant for berth itself, so they stay at `info`;
/// a full filter (`h2=trace`) is used as written.
fn expand_bare_level(filter: &str) -> String {
    const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];
    let level = filter.trim().to_ascii_lowercase();
    if !LEVELS.contains(&level.as_str())
        || matches!(level.as_str(), "error" | "warn" | "info" | "off")
    {
        return filter.to_string();
    }
    format!("{level},h2=info,hyper=info,hyper_util=info,tower=info,tonic=info")
}

/// Swaps the filter of the running subscriber (SIGHUP's `log_level`).
pub type LogHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Installs the global subscriber, logging to stderr; colours only on a
/// terminal, so logs kept in files and journals stay greppable. The handle
/// replaces the filter later.
pub fn init(filter: EnvFilter) -> LogHandle {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .init();
    handle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_verbose_levels_quiet_the_transport() {
        assert_eq!(
            expand_bare_level("debug"),
            "debug,h2=info,hyper=info,hyper_util=info,tower=info,tonic=info"
        );
        assert_eq!(expand_bare_level("info"), "info");
        assert_eq!(
            expand_bare_level("berthd=trace,h2=debug"),
            "berthd=trace,h2=debug"
        );
    }

    #[test]
    fn flag_wins_and_bad_filters_are_named() {
        assert!(filter(Some("debug"), LogLevel::Info).is_ok());
        let err = filter(Some("berthd=loud"), LogLevel::Info).unwrap_err();
        assert!(err.contains("--log-level"), "{err}");
    }
}
