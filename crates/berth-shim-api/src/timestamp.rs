//! RFC 3339 timestamps in UTC with nanoseconds, as the CRI log format and
//! the exit file use them: `2016-10-06T00:17:09.669794202Z`.
//!
//! The fraction always has nine digits (CRI-O does the same). containerd
//! formats with Go's `time.RFC3339Nano`, which trims trailing zeros; kubelet
//! and crictl parse with `RFC3339Nano`, which accepts any number of digits,
//! so both read ours. Fixed width keeps the log columns aligned and makes
//! timestamps sort as strings.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats `t` (UTC). Times before the epoch are clamped to the epoch.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    format_unix(secs, d.subsec_nanos())
}

/// The current time, formatted.
pub fn now() -> String {
    rfc3339_nano(SystemTime::now())
}

/// Formats seconds and nanoseconds since the Unix epoch.
pub fn format_unix(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
/// Howard Hinnant's `civil_from_days`: eras of 400 years (146097 days),
/// with years starting on March 1st so the leap day is the last day.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // shift the epoch to 0000-03-01
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of year [0, 365]
    let mp = (5 * doy + 2) / 153; // month from March [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    // d in 1..=31 and m in 1..=12, so the casts cannot truncate.
    (y, m as u32, d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn kubernetes_example() {
        assert_eq!(
            format_unix(1_475_713_029, 669_794_202),
            "2016-10-06T00:17:09.669794202Z"
        );
    }

    #[test]
    fn epoch_and_zero_fraction_keep_nine_digits() {
        assert_eq!(format_unix(0, 0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(format_unix(59, 1), "1970-01-01T00:00:59.000000001Z");
    }

    #[test]
    fn leap_days_and_year_ends() {
        // 2000-02-29 (a leap day of a century divisible by 400)
        assert_eq!(
            format_unix(951_782_400, 0),
            "2000-02-29T00:00:00.000000000Z"
        );
        // 2024-12-31T23:59:59
        assert_eq!(
            format_unix(1_735_689_599, 999_999_999),
            "2024-12-31T23:59:59.999999999Z"
        );
        // 2100-03-01 (2100 is not a leap year)
        assert_eq!(
            format_unix(4_107_542_400, 0),
            "2100-03-01T00:00:00.000000000Z"
        );
    }

    #[test]
    fn system_time() {
        let t = UNIX_EPOCH + Duration::new(1_475_713_029, 5);
        assert_eq!(rfc3339_nano(t), "2016-10-06T00:17:09.000000005Z");
        assert_eq!(
            rfc3339_nano(UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000000000Z"
        );
    }
}
