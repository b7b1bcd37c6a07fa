//! FIX UTCTimestamp (`YYYYMMDD-HH:MM:SS.sss`), written from Unix nanoseconds without a
//! calendar library or an allocation: the civil date from a day count (proleptic Gregorian).

/// Bytes of a UTCTimestamp with milliseconds.
pub const UTC_TIMESTAMP_LEN: usize = 21;

/// `unix_ns` as `YYYYMMDD-HH:MM:SS.sss` (every u64 of nanoseconds is before 2555: four
/// digits of year always suffice).
pub fn utc_timestamp(unix_ns: u64) -> [u8; UTC_TIMESTAMP_LEN] {
    let ms = unix_ns / 1_000_000;
    let (days, ms_of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, frac) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1_000 % 60,
        ms_of_day % 1_000,
    );
    let mut out = *b"00000000-00:00:00.000";
    put(&mut out[0..4], y);
    put(&mut out[4..6], m);
    put(&mut out[6..8], d);
    put(&mut out[9..11], h);
    put(&mut out[12..14], min);
    put(&mut out[15..17], s);
    put(&mut out[18..21], frac);
    out
}

/// A UTCTimestamp (`YYYYMMDD-HH:MM:SS`, optionally `.` and 1 to 9 digits of fraction) as Unix
/// nanoseconds; `None` for anything else (a date before 1970 or past 2500, a month 13, a
/// 25th hour, a 61st second, stray bytes). No allocation.
pub fn parse_utc_timestamp(text: &[u8]) -> Option<u64> {
    if text.len() < 17 || text[8] != b'-' || text[11] != b':' || text[14] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u64> {
        let digits = &text[range];
        digits.iter().try_fold(0u64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
        })
    };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, min, sec) = (num(9..11)?, num(12..14)?, num(15..17)?);
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    let in_range = (1970..=2500).contains(&y)
        && (1..=days_in_month).contains(&d)
        && h < 24
        && min < 60
        && sec <= 60;
    if !in_range {
        return None;
    }
    let frac_ns = match &text[17..] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            let value = num(18..text.len())?;
            value * 10u64.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let secs = days_from_civil(y, m, d) * 86_400 + h * 3_600 + min * 60 + sec;
    Some(secs * 1_000_000_000 + frac_ns)
}

/// Days from 1970-01-01 to the civil date (the inverse of `civil_from_days`).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `value` as zero-padded decimal filling `out`.
fn put(out: &mut [u8], mut value: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// (year, month, day) of the day `days` after 1970-01-01: the era arithmetic of the
/// proleptic Gregorian calendar (400-year eras of 146,097 days, years starting in March).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every timestamp keel writes reads back to its millisecond, and malformed or
    // impossible ones (the worst illegal values) are refused, never misread.
    #[test]
    fn a_written_timestamp_parses_back_and_bad_ones_are_refused() {
        for unix_ns in [
            0u64,
            951_782_400_123_000_000,
            1_796_193_000_001_000_000,
            16_725_225_599_999_000_000,
        ] {
            let text = utc_timestamp(unix_ns);
            assert_eq!(parse_utc_timestamp(&text), Some(unix_ns), "{unix_ns}");
        }
        assert_eq!(
            parse_utc_timestamp(b"20261202-06:30:00"),
            parse_utc_timestamp(b"20261202-06:30:00.000")
        );
        assert_eq!(
            parse_utc_timestamp(b"20261202-06:30:00.123456789").map(|n| n % 1_000_000_000),
            Some(123_456_789)
        );
        for bad in [
            &b""[..],
            b"20261202-06:30",
            b"20261302-06:30:00",
            b"20260230-06:30:00",
            b"20261202-24:00:00",
            b"20261202 06:30:00",
            b"20261202-06:30:00.",
            b"20261202-06:30:00.1234567890",
            b"19691231-23:59:59",
            b"25010101-00:00:00",
            b"2026120x-06:30:00",
            b"20261202-06:30:00Z",
        ] {
            assert_eq!(
                parse_utc_timestamp(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn known_instants() {
        let cases: [(u64, &[u8]); 6] = [
            (0, b"19700101-00:00:00.000"),
            // 2000-02-29 (a leap day of a century divisible by 400), 12:34:56.789.
            (951_827_696_789_000_000, b"20000229-12:34:56.789"),
            // 2026-12-02 06:30:00.001.
            (1_796_193_000_001_000_000, b"20261202-06:30:00.001"),
            // 2100-03-01 (2100 is not a leap year).
            (4_107_542_400_000_000_000, b"21000301-00:00:00.000"),
            // 1999-12-31 23:59:59.999.
            (946_684_799_999_999_999, b"19991231-23:59:59.999"),
            // The worst legal value: the last nanosecond a u64 holds, in 2554.
            (u64::MAX, b"25540721-23:34:33.709"),
        ];
        for (ns, want) in cases {
            assert_eq!(
                utc_timestamp(ns),
                *<&[u8; 21]>::try_from(want).unwrap(),
                "{ns}"
            );
        }
    }

    #[test]
    fn every_day_follows_the_last() {
        // Across 1970..2200 each day's date is the day after the previous one.
        let mut last = utc_timestamp(0);
        for day in 1..(230 * 366) {
            let t = utc_timestamp(day * 86_400 * 1_000_000_000);
            assert!(
                t[..8] > last[..8],
                "day {day}: {:?}",
                std::str::from_utf8(&t)
            );
            last = t;
        }
    }
}
