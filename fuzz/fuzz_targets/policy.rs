//! Policy documents (YAML or JSON) as the gateway takes them from operators and supervisors:
//! parse and validate, and for every accepted document the forms it is stored and sent in
//! (canonical JSON, YAML, the wire message) must load back to the same policy.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openshell_core::SandboxPolicy;
use openshell_core::policy::{migrate_legacy_policy_json, parse_and_validate};
use openshell_proto::sandbox::v1 as sb;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Rows written before the current schema are migrated with this on upgrade.
    let _ = migrate_legacy_policy_json(text);
    let Ok(policy) = parse_and_validate(text) else {
        return;
    };
    let canonical = policy.canonical_json();
    let from_json = parse_and_validate(&canonical).unwrap_or_else(|e| {
        panic!("the canonical JSON of a valid policy is refused: {e}\n{canonical}")
    });
    assert_eq!(
        from_json.canonical_json(),
        canonical,
        "canonical JSON is not stable"
    );

    let yaml = policy.to_yaml();
    let from_yaml = parse_and_validate(&yaml)
        .unwrap_or_else(|e| panic!("the YAML of a valid policy is refused: {e}\n{yaml}"));
    assert_eq!(
        from_yaml.policy_hash(),
        policy.policy_hash(),
        "YAML changes the policy:\n{yaml}"
    );

    let wire = sb::SandboxPolicy::from(&policy);
    let from_wire = SandboxPolicy::try_from(&wire)
        .unwrap_or_else(|e| panic!("the wire form of a valid policy does not convert back: {e}"));
    assert_eq!(
        from_wire.policy_hash(),
        policy.policy_hash(),
        "the wire form changes the policy"
    );
});
