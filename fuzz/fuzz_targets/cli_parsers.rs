//! The CLI's argument parsers (durations, wait deadlines, thresholds, times, `KEY=VALUE`
//! pairs, credentials, operation states) and sandbox references, on the same text. What they
//! accept must be in range, and a sandbox reference must print back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openshell_cli::parse;
use openshell_sdk::SandboxRef;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse::duration(text) {
        assert!(!d.is_zero(), "a zero duration was accepted from {text:?}");
    }
    if let Ok(d) = parse::wait_timeout(text) {
        assert!(
            !d.is_zero() && d <= parse::MAX_WAIT,
            "{d:?} accepted from {text:?}"
        );
    }
    if let Ok(t) = parse::threshold(text) {
        assert!(t > 0.0 && t <= 1.0, "{t} accepted from {text:?}");
    }
    let _ = parse::timestamp(text);
    let _ = parse::operation_state(text);
    if let Ok((key, value)) = parse::key_value(text) {
        assert!(!key.is_empty() && format!("{key}={value}") == text);
    }
    if let Ok((key, value)) = parse::credential(text) {
        assert!(!key.is_empty() && format!("{key}={value}") == text);
    }
    let reference = SandboxRef::from(text);
    assert_eq!(
        SandboxRef::from(reference.to_string()),
        reference,
        "{text:?}"
    );
});
