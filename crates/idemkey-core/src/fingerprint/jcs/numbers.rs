//! Whether the numbers of a JSON body are exactly what JCS writes for them: JCS writes each
//! as the IEEE double nearest it, which may not be the number the client sent (behaviour [§4](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#4-fingerprint)).

/// Every integer up to 2^53 in magnitude is a double.
pub(super) const EXACT_INTEGERS: u64 = 1 << 53;

/// Checks every number token of a body already known to be valid JSON.
pub(super) fn numbers_round_trip(body: &[u8]) -> bool {
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => i = skip_string(body, i + 1),
            b'-' | b'0'..=b'9' => {
                let end = body[i..]
                    .iter()
                    .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .map_or(body.len(), |n| i + n);
                if !number_round_trips(&body[i..end]) {
                    return false;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    true
}

fn skip_string(body: &[u8], mut i: usize) -> usize {
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Whether the number JCS writes for `token` denotes exactly the value `token` denotes.
fn number_round_trips(token: &[u8]) -> bool {
    short_number_verdict(token).unwrap_or_else(|| formatted_number_round_trips(token))
}

/// The verdict of [`number_round_trips`] on the short numbers most bodies hold, without
/// parsing or formatting a double; `None` for the others.
///
/// Zero round-trips unless negative (JCS writes `-0` as `0`). A nonzero number of at most 15
/// significant digits well inside the normal doubles does: no two such decimals round to the
/// same double (what `f64::DIGITS` means), and the shortest decimal that rounds to its double,
/// which JCS writes, has at most as many digits, so it is the number itself.
fn short_number_verdict(token: &[u8]) -> Option<bool> {
    // Short enough for every count below to fit an `i32`.
    const MAX_LEN: usize = 32;
    if token.len() > MAX_LEN {
        return None;
    }
    let (negative, unsigned) = match token {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, token),
    };
    let (mantissa, exponent) = match unsigned.iter().position(|&b| b == b'e' || b == b'E') {
        Some(at) => (&unsigned[..at], short_exponent(&unsigned[at + 1..])?),
        None => (unsigned, 0),
    };
    let (int, frac) = match mantissa.iter().position(|&b| b == b'.') {
        Some(at) => (&mantissa[..at], Some(&mantissa[at + 1..])),
        None => (mantissa, None),
    };
    let is_digits = |text: &[u8]| !text.is_empty() && text.iter().all(u8::is_ascii_digit);
    if !is_digits(int) || frac.is_some_and(|frac| !is_digits(frac)) {
        return None;
    }
    let frac = frac.unwrap_or_default();
    let mut buffer = [0; MAX_LEN];
    let digits = &mut buffer[..int.len() + frac.len()];
    digits[..int.len()].copy_from_slice(int);
    digits[int.len()..].copy_from_slice(frac);
    let Some(first) = digits.iter().position(|&d| d != b'0') else {
        return Some(!negative);
    };
    let last = digits.iter().rposition(|&d| d != b'0')?;
    let significant = last - first + 1;
    // The power of ten of the leading digit: within ±300, the value is a normal double.
    let leading = exponent + int.len() as i32 - 1 - first as i32;
    (significant <= f64::DIGITS as usize && (-300..=300).contains(&leading)).then_some(true)
}

/// An exponent's digits when there are at most four, after an optional sign.
fn short_exponent(text: &[u8]) -> Option<i32> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 4 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0, |n, d| n * 10 + i32::from(d - b'0'));
    Some(if negative { -value } else { value })
}

/// [`number_round_trips`] for any token: formats the double nearest it as JCS does, and
/// compares the decimal values.
fn formatted_number_round_trips(token: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(token) else {
        return false;
    };
    let Ok(value) = text.parse::<f64>() else {
        return false;
    };
    if !value.is_finite() {
        return false;
    }
    let mut buffer = ryu_js::Buffer::new();
    let written = buffer.format_finite(value);
    match (Decimal::parse(text), Decimal::parse(written)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A decimal number in a normal form: sign, significant digits (no leading or trailing
/// zeros), and the exponent of the last digit. Zero keeps its sign.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl Decimal {
    fn parse(text: &str) -> Option<Self> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all: String = [int, frac].concat();
        let exponent = exponent.checked_sub(i64::try_from(frac.len()).ok()?)?;
        let trimmed = all.trim_start_matches('0');
        let digits = trimmed.trim_end_matches('0');
        let zeros = i64::try_from(trimmed.len() - digits.len()).ok()?;
        let exponent = if digits.is_empty() {
            0
        } else {
            exponent.checked_add(zeros)?
        };
        Some(Self {
            negative,
            digits: digits.to_owned(),
            exponent,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn decimal_normal_form() {
        assert_eq!(Decimal::parse("1.50e1"), Decimal::parse("15"));
        assert_eq!(Decimal::parse("0.000"), Decimal::parse("0"));
        assert_ne!(Decimal::parse("-0"), Decimal::parse("0"));
        assert_eq!(Decimal::parse("1e99999999999999999999"), None);
    }

    #[test]
    fn short_numbers_skip_formatting() {
        for token in [
            "0", "12", "-5", "12.5", "0.1", "1E2", "4.50", "2e-3", "1e-300", "0e7",
        ] {
            assert_eq!(
                short_number_verdict(token.as_bytes()),
                Some(true),
                "{token}"
            );
        }
        for token in ["-0", "-0.0", "-0e-3"] {
            assert_eq!(
                short_number_verdict(token.as_bytes()),
                Some(false),
                "{token}"
            );
        }
        let long = [
            "9007199254740993",
            "1e-301",
            "1e301",
            "1e12345",
            "0e99999",
            "0.1e",
        ];
        for token in long {
            assert_eq!(short_number_verdict(token.as_bytes()), None, "{token}");
        }
    }

    #[test]
    fn short_verdicts_hold_at_the_edges() {
        // The digits nearest the 15-digit limit, and each power of ten around the ±300 cut.
        let digits = [
            "1",
            "5",
            "9",
            "999999999999999",
            "100000000000001",
            "123456789012345",
            "900719925474099",
            "450359962737049",
            "1000000000000000",
            "9999999999999999",
        ];
        let (mut tokens, mut decided) = (0, 0);
        for exponent in -330..=330 {
            for digits in digits {
                for token in [
                    format!("{digits}e{exponent}"),
                    format!("-0.{digits}E{exponent}"),
                ] {
                    tokens += 1;
                    decided += usize::from(assert_short_verdict_holds(&token));
                }
            }
        }
        // Up to 15 digits within the ±300 cut are decided: 8 of the 10 digit strings over most
        // of the exponents. A fast path that decided nothing would pass the asserts above.
        assert!(decided * 10 >= tokens * 6, "{decided} of {tokens} decided");
        for zero in ["0", "-0", "0.0", "-0.000", "0.000000000000000000000000"] {
            assert!(assert_short_verdict_holds(zero), "{zero} is decided");
            for exponent in [
                "e0", "E+0", "e-1", "e330", "e-330", "e9999", "E-9999", "e+0099",
            ] {
                assert_short_verdict_holds(&format!("{zero}{exponent}"));
            }
        }
    }

    /// Asserts that the fast path's verdict on `token`, if it gives one, is the slow path's;
    /// whether it gave one.
    fn assert_short_verdict_holds(token: &str) -> bool {
        let verdict = short_number_verdict(token.as_bytes());
        if let Some(verdict) = verdict {
            assert_eq!(
                verdict,
                formatted_number_round_trips(token.as_bytes()),
                "{token}"
            );
        }
        verdict.is_some()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn short_verdicts_agree_with_formatting(
            negative in any::<bool>(),
            zeros in "0{0,3}",
            digits in "[1-9][0-9]{0,16}",
            point in 0..18usize,
            trailing in "0{0,3}",
            exponent in prop::option::of(-330..330i32),
        ) {
            let sign = if negative { "-" } else { "" };
            let mantissa = format!("{zeros}{digits}{trailing}");
            let (int, frac) = mantissa.split_at(point.min(mantissa.len()));
            let int = if int.is_empty() { "0" } else { int };
            let frac = if frac.is_empty() { String::new() } else { format!(".{frac}") };
            let exponent = exponent.map(|e| format!("e{e}")).unwrap_or_default();
            assert_short_verdict_holds(&format!("{sign}{int}{frac}{exponent}"));
        }
    }

    #[test]
    fn integers_up_to_2_pow_53_need_no_check() {
        let limit = EXACT_INTEGERS as i64;
        for n in [0, 1, 9, 10, 999_999_999_999_999, 1 << 52, limit - 1, limit] {
            assert!(
                formatted_number_round_trips(n.to_string().as_bytes()),
                "{n}"
            );
            assert!(formatted_number_round_trips((-n).to_string().as_bytes()));
        }
        assert!(!formatted_number_round_trips(
            (limit + 1).to_string().as_bytes()
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        #[test]
        fn small_integers_round_trip(n in -(EXACT_INTEGERS as i64)..=EXACT_INTEGERS as i64) {
            prop_assert!(formatted_number_round_trips(n.to_string().as_bytes()));
        }
    }
}
