//! Human-readable durations for the command line: `500ms`, `30s`, `5m`, `1h30m`, `2d`.
//!
//! A dozen lines of our own rather than the `humantime` crate: the tool needs five
//! units and one error message, and every input it accepts is listed in its help.

use std::time::Duration;

/// Parses a duration made of one or more `<number><unit>` parts, with units `ms`, `s`,
/// `m`, `h` and `d`, e.g. `1h30m`. Never panics: junk and overflow are errors.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {text:?}: expected e.g. 500ms, 30s, 5m or 1h30m");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total_ms: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        // Byte counts of ASCII prefixes, so slicing at them stays on char boundaries.
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms: u64 = match &rest[..letters] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[letters..];
        total_ms = number
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(bad)?;
    }
    Ok(Duration::from_millis(total_ms))
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
            "",
            "s",
            "10",
            "10x",
            "10S",
            "1.5s",
            "-1s",
            "+1s",
            " 1s",
            "1s ",
            "banana",
            "1h 30m",
            "99999999999999999999s",
            "213503982334601d",
            "18446744073709551615s",
            "ß",
            "1ß",
            "1ms2",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(err.starts_with("invalid duration"), "{err}");
        }
    }

    proptest::proptest! {
        /// Any string at all: an answer, never a panic; an error always says what it is.
        #[test]
        fn any_string_gets_an_answer(input in "\\PC{0,40}") {
            if let Err(e) = parse(&input) {
                proptest::prop_assert!(e.starts_with("invalid duration"), "{}", e);
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
            let _ = parse(&format!("{input}{}", u64::MAX));
            let _ = parse(&format!("{}{input}", u64::MAX));
        }
    }
}
