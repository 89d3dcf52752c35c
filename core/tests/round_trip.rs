//! Property: any valid policy, written as YAML (or canonical JSON) and parsed again, is the
//! same document with the same hash. The generator (`support`) builds valid policies of every
//! endpoint kind and puts awkward text (quotes, colons, `#`, YAML keywords, non-ASCII)
//! wherever the schema takes free text, since quoting is where a YAML round trip breaks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use openshell_core::policy::{parse_and_validate, parse_policy};
use proptest::prelude::*;
use support::policy;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn valid_policies_round_trip(policy in policy()) {
        if let Err(violations) = policy.validate() {
            panic!("the generator built an invalid policy: {violations:?}\n{}", policy.to_yaml());
        }
        let yaml = policy.to_yaml();
        let back = parse_and_validate(&yaml)
            .unwrap_or_else(|e| panic!("its YAML does not load again: {e}\n{yaml}"));
        prop_assert_eq!(&back, &policy, "YAML:\n{}", yaml);
        prop_assert_eq!(back.policy_hash(), policy.policy_hash());

        let canonical = policy.canonical_json();
        let from_json = parse_policy(&canonical).unwrap();
        prop_assert_eq!(&from_json, &policy);
        prop_assert_eq!(from_json.canonical_json(), canonical);

        let pretty = serde_json::to_string_pretty(&policy).unwrap();
        prop_assert_eq!(parse_policy(&pretty).unwrap().policy_hash(), policy.policy_hash());
    }
}
