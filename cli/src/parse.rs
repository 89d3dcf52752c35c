//! Value parsers for command-line arguments. Errors here surface as clap
//! usage errors (exit 2), so they must say what was expected.

use std::time::{Duration, SystemTime};

use openshell_sdk::OperationState;

/// `KEY=VALUE`; the value may be empty or contain `=`, the key may not.
pub fn key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))?;
    check_key(key)?;
    Ok((key.to_owned(), value.to_owned()))
}

/// Like [`key_value`], but no error ever repeats the text: it may be a secret.
pub fn credential(text: &str) -> Result<(String, String), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err("expected NAME=VALUE (the value is not shown)".to_owned());
    };
    check_key(key)?;
    Ok((key.to_owned(), value.to_owned()))
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the key before '=' must not be empty".to_owned());
    }
    if key.chars().any(char::is_whitespace) {
        return Err(format!("key {key:?} must not contain whitespace"));
    }
    Ok(())
}

/// Longest wait deadline the gateway grants (DESIGN: at most 10 minutes);
/// it cuts a longer one short without saying so.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// Human durations such as `90s`, `2m` or `1m 30s`; a bare number is
/// seconds, as upstream's `--timeout 60` means.
pub fn duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let d = match trimmed.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(trimmed)
            .map_err(|e| format!("expected a duration such as 90s or 2m: {e}"))?,
    };
    if d.is_zero() {
        return Err("the duration must be greater than zero".to_owned());
    }
    Ok(d)
}

/// A wait deadline (`--timeout`): a [`duration`] of at most [`MAX_WAIT`],
/// refused rather than quietly shortened by the gateway. clap names the
/// flag and the value in front of this message.
pub fn wait_timeout(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d > MAX_WAIT {
        return Err(format!(
            "a wait lasts at most {}",
            humantime::format_duration(MAX_WAIT)
        ));
    }
    Ok(d)
}

/// A fraction in (0, 1].
pub fn threshold(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a fraction such as 0.95, got {text:?}"))?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(format!("{value} is not in (0, 1]"))
    }
}

/// RFC 3339 time, e.g. `2027-01-31T00:00:00Z`.
pub fn timestamp(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(text)
        .map_err(|e| format!("expected an RFC 3339 time such as 2027-01-31T00:00:00Z: {e}"))
}

pub fn operation_state(text: &str) -> Result<OperationState, String> {
    text.parse::<OperationState>().map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn key_value_accepts_equals_in_value_and_empty_value() {
        assert_eq!(
            key_value("a=b=c").unwrap(),
            ("a".to_string(), "b=c".to_string())
        );
        assert_eq!(key_value("a=").unwrap(), ("a".to_string(), String::new()));
    }

    #[test]
    fn key_value_errors() {
        assert_eq!(
            key_value("log_level").unwrap_err(),
            "expected KEY=VALUE, got \"log_level\""
        );
        assert!(
            key_value("=debug")
                .unwrap_err()
                .contains("must not be empty")
        );
        assert!(
            key_value("log level=debug")
                .unwrap_err()
                .contains("whitespace")
        );
    }

    #[test]
    fn credential_errors_never_echo_input() {
        let err = credential("sk-live-123").unwrap_err();
        assert!(!err.contains("sk-live-123"));
        let err = credential("=sk-live-123").unwrap_err();
        assert!(!err.contains("sk-live-123"));
        assert_eq!(
            credential("TOKEN=abc").unwrap(),
            ("TOKEN".to_string(), "abc".to_string())
        );
    }

    #[test]
    fn durations_and_thresholds() {
        assert_eq!(duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(duration("1m 30s").unwrap(), Duration::from_secs(90));
        assert!(duration("0s").is_err());
        assert!(duration("soon").is_err());
        // Upstream's `--timeout 60`: seconds.
        assert_eq!(duration("60").unwrap(), Duration::from_secs(60));
        assert!(duration("0").is_err());
        assert_eq!(wait_timeout("10m").unwrap(), MAX_WAIT);
        assert_eq!(wait_timeout("599s").unwrap(), Duration::from_secs(599));
        assert!(wait_timeout("0s").is_err());
        for longer in ["11m", "601s", "10m 1s", "1h"] {
            let err = wait_timeout(longer).unwrap_err();
            assert_eq!(err, "a wait lasts at most 10m", "{longer}");
        }
        assert_eq!(threshold("0.95").unwrap(), 0.95);
        assert_eq!(threshold("1").unwrap(), 1.0);
        assert!(threshold("0").is_err());
        assert!(threshold("1.01").is_err());
        assert!(threshold("NaN").is_err());
        assert!(threshold("lots").is_err());
    }

    #[test]
    fn timestamps_and_states() {
        assert!(timestamp("2027-01-31T00:00:00Z").is_ok());
        assert!(timestamp("tomorrow").is_err());
        assert_eq!(
            operation_state("superseded").unwrap(),
            OperationState::Superseded
        );
        assert!(operation_state("nope").unwrap_err().contains("PENDING"));
    }
}
