//! Timestamps. The core never reads a clock: callers pass milliseconds since the Unix epoch.

/// Milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Millis(pub i64);

impl Millis {
    pub fn plus_ms(self, ms: i64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-12-02T11:17:44.123Z`.
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1000);
        let ms = self.0.rem_euclid(1000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }

    /// Reads what [`Millis::to_rfc3339`] writes (UTC, `Z`, with or without milliseconds); `None`
    /// for anything else.
    pub fn parse_rfc3339(text: &str) -> Option<Millis> {
        let b = text.as_bytes();
        let digits = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = text.get(range)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let shape = b.len() >= 20
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && b[16] == b':'
            && b.last() == Some(&b'Z');
        if !shape {
            return None;
        }
        let ms = match &text[19..text.len() - 1] {
            "" => 0,
            fraction if fraction.len() == 4 && fraction.starts_with('.') => digits(20..23)?,
            _ => return None,
        };
        let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        let (hh, mm, ss) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
        if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
            return None;
        }
        let days = days_from_civil(y, m as u32, d as u32);
        Some(Millis(
            ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms,
        ))
    }
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The inverse of [`civil_from_days`]: days since 1970-01-01 of a civil date.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(Millis(0).to_rfc3339(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Millis(1_796_210_264_123).to_rfc3339(),
            "2026-12-02T11:17:44.123Z"
        );
        assert_eq!(
            Millis(951_782_400_000).to_rfc3339(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn what_is_formatted_parses_back_and_anything_else_is_refused() {
        for ms in [0, 1_796_210_264_123, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(
                Millis::parse_rfc3339(&Millis(ms).to_rfc3339()),
                Some(Millis(ms))
            );
        }
        assert_eq!(
            Millis::parse_rfc3339("2026-12-02T11:17:44Z"),
            Some(Millis(1_796_210_264_000))
        );
        for bad in [
            "",
            "2026-12-02",
            "2026-12-02T11:17:44.123+01:00",
            "2026-13-02T11:17:44.123Z",
            "2026-12-02T24:17:44.123Z",
            "2026-12-02T11:17:44.1Z",
            "2026-12-02T11:17:4x.123Z",
            "+026-12-02T11:17:44.123Z",
        ] {
            assert_eq!(Millis::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn days_and_civil_dates_round_trip() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }
}
