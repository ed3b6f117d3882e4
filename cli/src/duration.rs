//! Human-readable durations for the command line: `500ms`, `30s`, `5m`, `1h30m`, `2d`,
//! parsed from what the user wrote and printed back in the same form.
//!
//! A few dozen lines of our own rather than the `humantime` crate: the tool needs five
//! units and three messages (not a duration, negative, too long), and every input it
//! accepts is listed in its help.

use std::time::Duration;

/// The longest duration any option takes: ten years (`3650d`), the library's longest
/// TTL. Longer is "too long" rather than "invalid", whatever the option.
pub const MAX: Duration = sqlock::MAX_TTL;

/// The units, longest first, with their length in milliseconds.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses a duration made of one or more `<number><unit>` parts, with units `ms`, `s`,
/// `m`, `h` and `d`, e.g. `1h30m`, of at most [`MAX`]. Never panics: junk, a minus
/// sign and overflow are errors, each with its own message.
pub fn parse(text: &str) -> Result<Duration, String> {
    let ms = parse_ms(text)?;
    if ms > MAX.as_millis() {
        return Err(format!(
            "duration {text:?} is too long: the maximum is {}",
            in_units_of(MAX, text)
        ));
    }
    // At most MAX, so it fits.
    Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// The value in milliseconds, saturated rather than overflowing: any length is
/// well-formed, and only [`parse`] decides what is too long.
fn parse_ms(text: &str) -> Result<u128, String> {
    if let Some(rest) = text.strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "invalid duration {text:?}: a duration cannot be negative"
            ));
        }
    }
    let bad = || format!("invalid duration {text:?}: expected e.g. 500ms, 30s, 5m, 1h30m or 2d");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u128 = 0;
    let mut rest = text;
    // Each part's unit is shorter than the one before it, as `human` prints them:
    // `30m1h` or `1h1h` is more likely a slip than a sum.
    let mut last_unit_ms = u64::MAX;
    while !rest.is_empty() {
        // Byte counts of ASCII prefixes, so slicing at them stays on char boundaries.
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number = rest[..digits].bytes().fold(0u128, |n, d| {
            n.saturating_mul(10).saturating_add(u128::from(d - b'0'))
        });
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms = unit_ms(&rest[..letters]).ok_or_else(bad)?;
        if unit_ms >= last_unit_ms {
            return Err(format!(
                "invalid duration {text:?}: units go from the largest to the smallest, \
                 each once (d, h, m, s, ms), as in 1h30m"
            ));
        }
        last_unit_ms = unit_ms;
        rest = &rest[letters..];
        total = total.saturating_add(number.saturating_mul(u128::from(unit_ms)));
    }
    Ok(total)
}

fn unit_ms(unit: &str) -> Option<u64> {
    UNITS.iter().find(|(u, _)| *u == unit).map(|(_, ms)| *ms)
}

/// A duration as the tool prints it, in the form it reads: `501ms`, `30s`, `1h30m`,
/// `1s500ms`, `3650d`; rounded to the millisecond, `0s` for zero.
pub fn human(d: Duration) -> String {
    let mut ms = d.as_nanos().saturating_add(500_000) / 1_000_000;
    if ms == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, len) in UNITS {
        let n = ms / u128::from(len);
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
            ms -= n * u128::from(len);
        }
    }
    out
}

/// `limit` in the largest unit the user wrote in `text` when it is a whole number of
/// it (`3650d`, `87600h`), else (or with it) in the tool's own form: a limit is
/// easiest to read in the unit the user thinks in.
pub fn in_units_of(limit: Duration, text: &str) -> String {
    let written = UNITS
        .iter()
        .find(|(unit, _)| wrote_unit(text, unit))
        .map(|(unit, len)| (*unit, u128::from(*len)));
    let own = human(limit);
    match written {
        Some((unit, len)) if limit.as_millis() % len == 0 => {
            let mine = format!("{}{unit}", limit.as_millis() / len);
            if mine == own {
                own
            } else {
                format!("{mine} ({own})")
            }
        }
        _ => own,
    }
}

/// Whether `text` has a part in `unit` (`1m` has `m`; `1ms` has `ms`, not `m`).
fn wrote_unit(text: &str, unit: &str) -> bool {
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        if letters == 0 && digits == 0 {
            return false;
        }
        if &rest[..letters] == unit {
            return true;
        }
        rest = &rest[letters..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1h30m15s250ms"), Ok(Duration::from_millis(5_415_250)));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("007s"), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn refuses_junk_with_a_clear_message() {
        for bad in [
            "", "s", "10", "10x", "10S", "1.5s", "-1s", "+1s", " 1s", "1s ", "banana", "1h 30m",
            "ß", "1ß", "1ms2",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.starts_with("invalid duration"), "{err}");
        }
        let err = parse("-5s").unwrap_err();
        assert!(err.ends_with("cannot be negative"), "{err}");
    }

    #[test]
    fn units_go_from_the_largest_down_each_once() {
        for bad in ["30m1h", "1s1m", "1h1h", "5ms1s", "1d2h3h"] {
            let err = parse(bad).expect_err(bad);
            assert!(
                err.contains("units go from the largest to the smallest"),
                "{bad}: {err}"
            );
        }
        assert_eq!(parse("1d1h1m1s1ms"), Ok(Duration::from_millis(90_061_001)));
    }

    #[test]
    fn long_durations_are_too_long_in_the_unit_written() {
        assert_eq!(parse("3650d"), Ok(MAX));
        assert_eq!(parse("87600h"), Ok(MAX));
        for (text, max) in [
            ("3651d", "3650d"),
            ("99999999999999999999s", "315360000s (3650d)"),
            ("213503982334601d", "3650d"),
            ("18446744073709551615ms", "315360000000ms (3650d)"),
            ("100000h", "87600h (3650d)"),
            ("1d99999999h1s", "3650d"),
            (
                "99999999999999999999999999999999999999999999m",
                "5256000m (3650d)",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(
                err,
                format!("duration {text:?} is too long: the maximum is {max}")
            );
        }
    }

    #[test]
    fn prints_what_it_reads() {
        assert_eq!(human(Duration::from_nanos(501_024_989)), "501ms");
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_micros(400)), "0s");
        assert_eq!(human(Duration::from_secs(5400)), "1h30m");
        assert_eq!(human(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(human(MAX), "3650d");
        assert_eq!(in_units_of(sqlock::MIN_TTL, "0s"), "10ms");
        assert_eq!(in_units_of(MAX, "1h30m"), "87600h (3650d)");
    }

    proptest::proptest! {
        /// Any string at all: an answer, never a panic; an error always says what it is.
        #[test]
        fn any_string_gets_an_answer(input in "\\PC{0,40}") {
            match parse(&input) {
                Ok(d) => proptest::prop_assert!(d <= MAX),
                Err(e) => proptest::prop_assert!(
                    e.starts_with("invalid duration") || e.contains("is too long"), "{}", e),
            }
        }

        /// Strings made of the parser's own pieces (digits and units, in any order and
        /// number): an answer, never a panic, and a well-formed one gives its value.
        #[test]
        fn pieces_in_any_order(parts in proptest::collection::vec(
            (0u64..100_000, proptest::sample::select(vec!["ms", "s", "m", "h", "d", "", "x"])),
            0..6,
        )) {
            let input: String = parts.iter().map(|(n, u)| format!("{n}{u}")).collect();
            let _ = parse(&input);
        }

        /// Hours, minutes, seconds and milliseconds written out parse back to their sum.
        #[test]
        fn written_durations_round_trip(h in 0u64..1_000, m in 0u64..60, s in 0u64..60, ms in 0u64..1_000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = Duration::from_millis(((h * 60 + m) * 60 + s) * 1_000 + ms);
            proptest::prop_assert_eq!(parse(&text), Ok(want));
            proptest::prop_assert_eq!(parse(&human(want)), Ok(want));
        }
    }

    /// Every string of up to three characters from an alphabet of digits, units,
    /// signs, spaces and multi-byte characters: an answer, never a panic.
    #[test]
    fn never_panics() {
        let alphabet = ['0', '9', 'm', 's', 'h', 'd', 'x', '.', '-', ' ', 'é', '日'];
        let mut inputs = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> = inputs
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            inputs.extend(longer);
        }
        for input in &inputs {
            let _ = parse(input);
            let _ = in_units_of(MAX, input);
            let _ = parse(&format!("{input}{}", u64::MAX));
            let _ = parse(&format!("{}{input}", u64::MAX));
        }
    }
}
