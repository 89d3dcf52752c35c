//! The terminal-state rule of `OperationState`: the one definition the
//! gateway, the client core and, through it, the Node and Python SDKs use.
//!
//! It lives with the generated enum because it is part of the contract
//! (`types.proto` marks each terminal state), not a choice of any one side.

use crate::v1::OperationState;

impl OperationState {
    /// True for the states an operation never leaves. An exhaustive match, so
    /// a state added to the contract fails to build until it is classified.
    pub const fn is_terminal(self) -> bool {
        match self {
            Self::Unspecified | Self::Pending | Self::Delivered => false,
            Self::Applied | Self::Failed | Self::Superseded | Self::Inactive | Self::Cancelled => {
                true
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every state with its wire number, read from prost's conversion so the
    /// list cannot miss one.
    fn all_states() -> Vec<OperationState> {
        (0..)
            .map_while(|n| OperationState::try_from(n).ok())
            .collect()
    }

    #[test]
    fn terminal_states_are_the_ones_the_contract_marks() {
        // `types.proto` comments each terminal state with `// Terminal:` on
        // the line above it; the rule must agree with the contract's text.
        let proto = include_str!("../openshell/v1/types.proto");
        let body = proto
            .split("enum OperationState {")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("types.proto defines enum OperationState");
        let mut marked = Vec::new();
        let mut previous = "";
        for line in body.lines().map(str::trim) {
            if let Some(name) = line.split_whitespace().next()
                && name.starts_with("OPERATION_STATE_")
                && previous.starts_with("// Terminal:")
            {
                marked.push(name.to_owned());
            }
            previous = line;
        }

        let terminal: Vec<_> = all_states()
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str_name().to_owned())
            .collect();
        assert_eq!(terminal, marked);
        assert_eq!(
            terminal,
            [
                "OPERATION_STATE_APPLIED",
                "OPERATION_STATE_FAILED",
                "OPERATION_STATE_SUPERSEDED",
                "OPERATION_STATE_INACTIVE",
                "OPERATION_STATE_CANCELLED",
            ]
        );
    }
}
