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
