//! Incremental edits as upstream's `openshell.v1.PolicyMergeOperation` messages, and back.
//!
//! Reading reports every problem at once, each addressed from the request's root
//! (`merge_operations[2].add_rule.rule.endpoints[0].rules[1].allow.query.q`), so an SDK user
//! sees the same paths whether the edit came from text flags or typed messages.

use openshell_proto::v1 as api;
use openshell_proto::v1::policy_merge_operation::Operation;

use super::{Reader, WireError, WireMatch, match_to_wire, network_policy_to_wire};
use crate::policy::edit::PolicyEdit;
use crate::policy::schema::Rule;

impl From<&PolicyEdit> for api::PolicyMergeOperation {
    fn from(edit: &PolicyEdit) -> Self {
        let operation = match edit {
            PolicyEdit::AddRule { rule_name, rule } => Operation::AddRule(api::AddNetworkRule {
                rule_name: rule_name.clone(),
                rule: Some(network_policy_to_wire(rule)),
            }),
            PolicyEdit::RemoveEndpoint {
                rule_name,
                host,
                port,
            } => Operation::RemoveEndpoint(api::RemoveNetworkEndpoint {
                rule_name: rule_name.clone().unwrap_or_default(),
                host: host.clone(),
                port: *port,
            }),
            PolicyEdit::RemoveRule { rule_name } => Operation::RemoveRule(api::RemoveNetworkRule {
                rule_name: rule_name.clone(),
            }),
            PolicyEdit::AddDenyRules {
                host,
                port,
                deny_rules,
            } => Operation::AddDenyRules(api::AddDenyRules {
                host: host.clone(),
                port: *port,
                deny_rules: deny_rules.iter().map(|d| match_to_wire(d).into()).collect(),
            }),
            PolicyEdit::AddAllowRules { host, port, rules } => {
                Operation::AddAllowRules(api::AddAllowRules {
                    host: host.clone(),
                    port: *port,
                    rules: rules
                        .iter()
                        .map(|rule| openshell_proto::sandbox::v1::L7Rule {
                            allow: Some(match_to_wire(&rule.allow).into()),
                        })
                        .collect(),
                })
            }
            PolicyEdit::RemoveBinary {
                rule_name,
                binary_path,
            } => Operation::RemoveBinary(api::RemoveNetworkBinary {
                rule_name: rule_name.clone(),
                binary_path: binary_path.clone(),
            }),
        };
        Self {
            operation: Some(operation),
        }
    }
}

/// Reads a request's `merge_operations` into edits.
pub fn edits_from_wire(
    operations: &[api::PolicyMergeOperation],
) -> Result<Vec<PolicyEdit>, WireError> {
    let mut out = Reader::default();
    let mut edits = Vec::with_capacity(operations.len());
    for (i, message) in operations.iter().enumerate() {
        let base = format!("merge_operations[{i}]");
        let Some(operation) = &message.operation else {
            out.refuse(
                base,
                "empty: set one of add_rule, remove_endpoint, remove_rule, add_deny_rules, add_allow_rules, remove_binary",
            );
            continue;
        };
        edits.push(match operation {
            Operation::AddRule(add) => {
                let loc = format!("{base}.add_rule.rule");
                let Some(rule) = &add.rule else {
                    out.refuse(loc, "missing: the rule to add");
                    continue;
                };
                PolicyEdit::AddRule {
                    rule_name: add.rule_name.clone(),
                    rule: out.network_policy(&loc, rule),
                }
            }
            Operation::RemoveEndpoint(remove) => PolicyEdit::RemoveEndpoint {
                rule_name: Some(remove.rule_name.clone()).filter(|name| !name.is_empty()),
                host: remove.host.clone(),
                port: remove.port,
            },
            Operation::RemoveRule(remove) => PolicyEdit::RemoveRule {
                rule_name: remove.rule_name.clone(),
            },
            Operation::AddDenyRules(add) => PolicyEdit::AddDenyRules {
                host: add.host.clone(),
                port: add.port,
                deny_rules: add
                    .deny_rules
                    .iter()
                    .enumerate()
                    .map(|(j, deny)| {
                        let loc = format!("{base}.add_deny_rules.deny_rules[{j}]");
                        out.rule_match(&loc, WireMatch::from(deny))
                    })
                    .collect(),
            },
            Operation::AddAllowRules(add) => PolicyEdit::AddAllowRules {
                host: add.host.clone(),
                port: add.port,
                rules: add
                    .rules
                    .iter()
                    .enumerate()
                    .filter_map(|(j, rule)| {
                        let loc = format!("{base}.add_allow_rules.rules[{j}].allow");
                        let Some(allow) = &rule.allow else {
                            out.refuse(loc, "missing: a rule says what it allows under allow");
                            return None;
                        };
                        Some(Rule {
                            allow: out.rule_match(&loc, WireMatch::from(allow)),
                        })
                    })
                    .collect(),
            },
            Operation::RemoveBinary(remove) => PolicyEdit::RemoveBinary {
                rule_name: remove.rule_name.clone(),
                binary_path: remove.binary_path.clone(),
            },
        });
    }
    if out.violations.is_empty() {
        Ok(edits)
    } else {
        Err(WireError {
            violations: out.violations,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::policy::edit::EditSpecs;

    #[test]
    fn edits_survive_the_wire() {
        let specs = EditSpecs {
            add_endpoints: vec!["api.github.com:443:read-only:rest".into()],
            remove_endpoints: vec!["old.example:80".into()],
            add_allow: vec!["api.github.com:443:POST:/repos/**".into()],
            add_deny: vec!["api.github.com:443:DELETE:/**".into()],
            remove_rules: vec!["legacy".into()],
            binaries: vec!["/usr/bin/gh".into()],
            rule_name: None,
        };
        let mut edits = specs.to_edits().unwrap();
        edits.push(PolicyEdit::RemoveBinary {
            rule_name: "github".into(),
            binary_path: "/usr/bin/curl".into(),
        });
        let messages: Vec<api::PolicyMergeOperation> = edits.iter().map(Into::into).collect();
        assert_eq!(edits_from_wire(&messages).unwrap(), edits);
    }

    #[test]
    fn bad_messages_are_refused_with_their_paths() {
        let messages = vec![
            api::PolicyMergeOperation { operation: None },
            api::PolicyMergeOperation {
                operation: Some(Operation::AddRule(api::AddNetworkRule {
                    rule_name: "x".into(),
                    rule: None,
                })),
            },
            api::PolicyMergeOperation {
                operation: Some(Operation::AddAllowRules(api::AddAllowRules {
                    host: "h".into(),
                    port: 443,
                    rules: vec![openshell_proto::sandbox::v1::L7Rule { allow: None }],
                })),
            },
        ];
        let err = edits_from_wire(&messages).unwrap_err();
        let fields: Vec<&str> = err.violations.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "merge_operations[0]",
                "merge_operations[1].add_rule.rule",
                "merge_operations[2].add_allow_rules.rules[0].allow",
            ]
        );
    }
}
