//! Durations that come in requests, bounded before they reach a clock.
//!
//! CRI timeouts are plain seconds (`i64`); `Instant + Duration` panics on
//! overflow, so a client sending `i64::MAX` must not reach one. As runc and
//! containerd treat a very long timeout as "wait", a huge value is clamped
//! rather than refused.

use std::time::Duration;

/// The longest a request may ask berthd to wait: one year, far beyond any
/// timeout kubelet sends and far below where clock arithmetic overflows.
pub const MAX_REQUEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// A CRI timeout in seconds: negative is 0 (none), above
/// [`MAX_REQUEST_WAIT`] is clamped to it.
pub fn clamp_timeout_seconds(seconds: i64) -> u64 {
    u64::try_from(seconds)
        .unwrap_or(0)
        .min(MAX_REQUEST_WAIT.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_and_negative_timeouts_are_bounded() {
        assert_eq!(clamp_timeout_seconds(-5), 0);
        assert_eq!(clamp_timeout_seconds(0), 0);
        assert_eq!(clamp_timeout_seconds(30), 30);
        assert_eq!(clamp_timeout_seconds(i64::MAX), MAX_REQUEST_WAIT.as_secs());
        // what a clamped value is used for must not overflow
        let far = tokio::time::Instant::now()
            + Duration::from_secs(clamp_timeout_seconds(i64::MAX))
            + Duration::from_secs(30);
        assert!(far > tokio::time::Instant::now());
    }
}
