//! Values as envoyproxy/ratelimit's Go settings parse them (`envconfig` with `strconv` and
//! `time.ParseDuration`), so a variable that upstream accepts means the same here and one it
//! rejects is rejected here too.

use std::time::Duration;

/// `strconv.ParseBool`: `1 t T TRUE true True` and `0 f F FALSE false False`.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "`{text}` is not a Go boolean (true, false, 1, 0, t, f)"
        )),
    }
}

/// A decimal integer, as `strconv.ParseInt` reads settings (no sign for counts and ports).
pub fn parse_unsigned(text: &str) -> Result<u64, String> {
    text.parse::<u64>()
        .map_err(|_| format!("`{text}` is not a non-negative integer"))
}

/// `time.ParseDuration`: a sequence of decimal numbers, each with an optional fraction and a
/// unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), as `300ms` or `1h30m`; `0` alone needs no unit.
/// Negative durations mean nothing for these settings and are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("`{text}` is not a Go duration (e.g. 300ms, 10s, 1h30m)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        nanos += value * scale;
        rest = next;
    }
    if !nanos.is_finite() || nanos > u64::MAX as f64 {
        return Err(invalid());
    }
    Ok(Duration::from_nanos(nanos.round() as u64))
}

/// A duration as the command line's flags read it (humantime), in the largest unit that holds
/// it whole: `24h`, `90s`, `300ms`.
pub fn duration_flag(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    const UNITS: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    if nanos == 0 {
        return "0s".into();
    }
    let (scale, unit) = UNITS
        .iter()
        .find(|(scale, _)| nanos % scale == 0)
        .copied()
        .unwrap_or((1, "ns"));
    format!("{}{unit}", nanos / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        for (duration, text) in [
            (Duration::from_secs(86_400), "24h"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_nanos(1_500), "1500ns"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(duration_flag(duration), text);
            assert_eq!(humantime::parse_duration(text).ok(), Some(duration));
        }
    }

    #[test]
    fn booleans_are_go_booleans() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(text), Ok(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(text), Ok(false), "{text}");
        }
        for text in ["yes", "on", "tRUE", " true", ""] {
            assert!(parse_bool(text).is_err(), "{text}");
        }
    }

    #[test]
    fn durations_are_go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("300ms"), Ok(ms(300)));
        assert_eq!(parse_duration("10s"), Ok(ms(10_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_duration("2µs"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_duration("+5s"), Ok(ms(5_000)));
        for text in ["", "10", "s", "1x", "-1s", "1 s", ".s", "1h30"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }

    #[test]
    fn durations_round_trip_through_the_flag_syntax() {
        for text in ["300ms", "1h30m", "2us", "24h"] {
            let duration = parse_duration(text).unwrap();
            let flag = duration_flag(duration);
            assert_eq!(humantime::parse_duration(&flag), Ok(duration), "{text}");
        }
    }
}
