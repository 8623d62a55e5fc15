//! Durations as lockstep's files write them: a whole number and one unit,
//! `90s`, `15m`, `4h`. The one parser every caller uses (the configuration,
//! plans' soaks and windows, `--fault`); rules of one field (a window at
//! most 7 days long, say) are checked on top of it where that field is read.

use std::time::Duration;

use thiserror::Error;

/// Why a text is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not digits followed by `s`, `m` or `h`.
    #[error("{0:?} is not a duration like 90s, 15m or 1h")]
    Malformed(String),
    /// `0s` where only a duration longer than zero makes sense.
    #[error("{0:?} must be longer than zero")]
    Zero(String),
    /// Digits and a unit, but more seconds than fit in 64 bits.
    #[error("{0:?} is too long")]
    TooLong(String),
}

/// `90s`, `15m`, `1h`; `0s` too.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let per: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(DurationError::Malformed(text.to_owned())),
    };
    if digits == 0 {
        return Err(DurationError::Malformed(text.to_owned()));
    }
    // Only digits: the one way to fail is a number past u64.
    let n: u64 = number
        .parse()
        .map_err(|_| DurationError::TooLong(text.to_owned()))?;
    n.checked_mul(per)
        .map(Duration::from_secs)
        .ok_or_else(|| DurationError::TooLong(text.to_owned()))
}

/// [`parse`], and longer than zero: an interval, a timeout, a window.
pub fn positive(text: &str) -> Result<Duration, DurationError> {
    match parse(text)? {
        d if d.is_zero() => Err(DurationError::Zero(text.to_owned())),
        d => Ok(d),
    }
}

/// The JSON Schema of a duration field that must be longer than zero.
pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[0-9]+(s|m|h)$",
        "description": "A duration: 90s, 15m, 1h."
    })
}

/// The JSON Schema of a duration that may be zero (`0s`: no soak).
pub fn schema_or_zero(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[0-9]+(s|m|h)$",
        "description": "A duration: 0s, 90s, 15m, 1h."
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_zero() {
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse("4h"), Ok(Duration::from_secs(4 * 3600)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(positive("0m"), Err(DurationError::Zero("0m".into())));
        assert_eq!(positive("1s"), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn malformed_and_too_long() {
        for bad in ["", "s", "90", "-5s", "1.5h", "5 m", "5d", "5S", "m5", "5ms"] {
            assert_eq!(
                parse(bad),
                Err(DurationError::Malformed(bad.into())),
                "{bad:?}"
            );
        }
        let huge = format!("{}s", "9".repeat(30));
        assert_eq!(parse(&huge), Err(DurationError::TooLong(huge.clone())));
        // Fits in u64 as a number, not as seconds.
        let hours = format!("{}h", u64::MAX / 3600 + 1);
        assert_eq!(parse(&hours), Err(DurationError::TooLong(hours.clone())));
        assert!(
            parse("90x")
                .unwrap_err()
                .to_string()
                .contains("90s, 15m or 1h"),
            "says what a duration looks like"
        );
    }
}
