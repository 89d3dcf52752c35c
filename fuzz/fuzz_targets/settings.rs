//! Setting values as operators and the API send them: the registry's parse of a raw value for
//! a key at a scope. Input: one byte choosing the scope, then `KEY=RAW` in UTF-8. A value the
//! parser accepts must pass the typed check the store applies, and survive its JSON form.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openshell_core::settings::{Scope, SettingValue, check_value, lookup, parse_setting};

fuzz_target!(
    init: openshell_fuzz::seeds::write_if_asked("settings"),
    |data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let scope = Scope::ALL[usize::from(selector) % Scope::ALL.len()];
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (key, raw) = text.split_once('=').unwrap_or((text, ""));
    let Ok(value) = parse_setting(key, raw, scope) else {
        return;
    };
    assert!(lookup(key).is_some(), "an unknown key {key:?} was accepted");
    if let Err(v) = check_value(key, &value, scope) {
        panic!("parsed {raw:?} for {key} but the typed check refuses it: {v}");
    }
    let json = serde_json::to_string(&value).expect("a setting value serializes");
    let back: SettingValue = serde_json::from_str(&json).expect("a setting value deserializes");
    assert_eq!(back, value, "JSON changes the value");
}
);
