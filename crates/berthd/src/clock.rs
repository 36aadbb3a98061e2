//! Time as CRI carries it: nanoseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// `2016-10-06T00:17:09.669794202Z` as nanoseconds since the epoch (UTC only,
/// as the shim writes it).
pub fn rfc3339_nanos(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.split('-').map(|part| part.parse::<i64>());
    let (year, month, day) = (
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
        date_parts.next()?.ok()?,
    );
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut clock_parts = clock.split(':').map(|part| part.parse::<i64>());
    let (hour, minute, second) = (
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
        clock_parts.next()?.ok()?,
    );
    let digits: String = fraction.chars().take(9).collect();
    let nanos = format!("{digits:0<9}").parse::<i64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60 * 1_000_000_000 + second * 1_000_000_000 + nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_shim_timestamps() {
        assert_eq!(rfc3339_nanos("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(rfc3339_nanos("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(
            rfc3339_nanos("2016-10-06T00:17:09.669794202Z"),
            Some(1_475_713_029_669_794_202)
        );
        assert_eq!(rfc3339_nanos("2016-10-06 00:17:09"), None);
    }
}
