//! Exit codes (DESIGN §12), so scripts can tell "applied" from "not in
//! effect" from "still pending" without parsing output.

use std::fmt;

use openshell_sdk::{Operation, OperationState, SdkError};

/// Applied or unchanged; superseded (with a warning); commit-only success.
pub const SUCCESS: u8 = 0;
/// An error, or the change failed to apply.
pub const FAILURE: u8 = 1;
/// `policy diff` found differences, as diff(1) reports them.
pub const DIFFERENT: u8 = 1;
/// `policy validate` found the policy invalid.
pub const INVALID: u8 = 1;
/// Bad usage; clap uses the same code for its own errors.
pub const USAGE: u8 = 2;
/// The change is not in effect: INACTIVE or CANCELLED.
pub const NOT_IN_EFFECT: u8 = 3;
/// The gateway was lost while waiting for an operation: the connection broke
/// or it stopped answering. EX_UNAVAILABLE of sysexits(3). The outcome is
/// unknown, not failed: the operation may still complete.
pub const GATEWAY_UNAVAILABLE: u8 = 69;
/// The wait deadline passed with the operation still pending, as `timeout(1)` does.
pub const WAIT_TIMED_OUT: u8 = 124;
/// Ctrl-C stopped a wait; 128 + SIGINT, as shells report a process killed by it.
/// Only the wait stopped: the operation goes on at the gateway.
pub const INTERRUPTED: u8 = 130;

/// Shown at the end of `openshell --help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    applied or unchanged; superseded (with a warning); committed with --commit-only
  1    error, or the change failed to apply (FAILED); `policy diff`: the policies differ;
       `policy validate`: the policy is invalid; `status`, `doctor`: the gateway did not
       answer or a check failed
  2    usage error
  3    the change is not in effect: INACTIVE (sandbox stopped, local policy, global policy
       replaces the sandbox policy) or CANCELLED
  69   gateway unavailable while waiting, and not back within 30s of reconnecting; the operation may
       still complete (`openshell operations get ID`);
       `sandbox logs --follow`: the gateway ended or lost the stream
  124  wait timed out; the operation is still pending (`openshell operations wait ID`)
  130  interrupted (Ctrl-C) while waiting; the operation goes on (`openshell operations wait ID`)";

/// The exit code for an operation a command waited on.
///
/// A live operation counts as timed out unless a fleet `threshold` it was
/// waited with is already met.
pub fn for_waited(op: &Operation, threshold: Option<f64>) -> u8 {
    match op.state {
        OperationState::Applied | OperationState::Superseded => SUCCESS,
        OperationState::Failed => FAILURE,
        OperationState::Inactive | OperationState::Cancelled => NOT_IN_EFFECT,
        OperationState::Pending | OperationState::Delivered | OperationState::Unspecified => {
            if threshold.is_some_and(|t| op.threshold_met(t)) {
                SUCCESS
            } else {
                WAIT_TIMED_OUT
            }
        }
    }
}

/// The exit code for an error that ended a wait on an operation.
///
/// Losing the gateway says nothing about the operation, so it must not
/// read as FAILED (1). The SDK reports a refused or dropped connection as
/// UNAVAILABLE (after its own retries), a gateway that stopped answering as
/// DEADLINE_EXCEEDED, and a connection that broke under an open stream as
/// whatever gRPC code tonic derives from the HTTP/2 error: UNKNOWN or
/// CANCELLED, which the gateway never sends itself, or INTERNAL with tonic's
/// "h2 protocol error" message.
pub fn for_wait_error(err: &SdkError) -> u8 {
    match err {
        SdkError::Unavailable(_) | SdkError::Transport(_) | SdkError::DeadlineExceeded(_) => {
            GATEWAY_UNAVAILABLE
        }
        SdkError::Other { code, message }
            if code == "UNKNOWN"
                || code == "CANCELLED"
                || message.starts_with("h2 protocol error") =>
        {
            GATEWAY_UNAVAILABLE
        }
        SdkError::WaitTimedOut { .. } => WAIT_TIMED_OUT,
        _ => FAILURE,
    }
}

/// A mistake in how the command was used, found after parsing (exit 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use openshell_sdk::{ApplyOutcome, FleetProgress, TargetKind};

    use super::*;

    pub(crate) fn operation(state: OperationState) -> Operation {
        Operation {
            id: "op-0193".into(),
            target_kind: TargetKind::Sandbox,
            target: "sb-1".into(),
            state,
            outcome: ApplyOutcome::Unspecified,
            error: None,
            policy_revision: 2,
            settings_revision: 0,
            global_policy_revision: 0,
            no_op: false,
            idempotency_key: None,
            created_at: Some("2026-11-29T09:30:00.000Z".into()),
            updated_at: None,
            completed_at: None,
            wait_timed_out: false,
            fleet: None,
            caller: "ops".into(),
        }
    }

    #[test]
    fn maps_every_state() {
        let cases = [
            (OperationState::Applied, SUCCESS),
            (OperationState::Superseded, SUCCESS),
            (OperationState::Failed, FAILURE),
            (OperationState::Inactive, NOT_IN_EFFECT),
            (OperationState::Cancelled, NOT_IN_EFFECT),
            (OperationState::Pending, WAIT_TIMED_OUT),
            (OperationState::Delivered, WAIT_TIMED_OUT),
            (OperationState::Unspecified, WAIT_TIMED_OUT),
        ];
        for (state, code) in cases {
            assert_eq!(for_waited(&operation(state), None), code, "{state}");
        }
    }

    #[test]
    fn met_fleet_threshold_is_success() {
        let mut op = operation(OperationState::Pending);
        op.fleet = Some(FleetProgress {
            targets: 20,
            applied: 19,
            pending: 1,
            ..FleetProgress::default()
        });
        assert_eq!(for_waited(&op, Some(0.95)), SUCCESS);
        assert_eq!(for_waited(&op, Some(1.0)), WAIT_TIMED_OUT);
        assert_eq!(for_waited(&op, None), WAIT_TIMED_OUT);
    }

    #[test]
    fn a_lost_gateway_is_not_a_failed_apply() {
        let lost = [
            SdkError::Unavailable("cannot connect to gateway at http://127.0.0.1:7070".into()),
            SdkError::Transport("transport error".into()),
            SdkError::DeadlineExceeded("the gateway did not answer within 1m 30s".into()),
            // What a killed gateway leaves under an open WaitForApply stream.
            SdkError::Other {
                code: "UNKNOWN".into(),
                message: "h2 protocol error: error reading a body from connection".into(),
            },
            SdkError::Other {
                code: "INTERNAL".into(),
                message: "h2 protocol error: stream no longer needed".into(),
            },
            SdkError::Other {
                code: "CANCELLED".into(),
                message: "operation was canceled: connection closed".into(),
            },
        ];
        for err in &lost {
            assert_eq!(for_wait_error(err), GATEWAY_UNAVAILABLE, "{err:?}");
        }
        let answered = [
            SdkError::NotFound("operation op-1 not found".into()),
            SdkError::Unauthenticated("bad token".into()),
            SdkError::FailedPrecondition("sandbox is deleted".into()),
            SdkError::InvalidArgument {
                message: "threshold must be in (0, 1]".into(),
                violations: Vec::new(),
            },
            // The gateway's own INTERNAL is an answer, not a lost connection.
            SdkError::Other {
                code: "INTERNAL".into(),
                message: "the store failed".into(),
            },
        ];
        for err in &answered {
            assert_eq!(for_wait_error(err), FAILURE, "{err:?}");
        }
        let timed_out = SdkError::WaitTimedOut {
            operation: Box::new(operation(OperationState::Pending)),
        };
        assert_eq!(for_wait_error(&timed_out), WAIT_TIMED_OUT);
    }

    #[test]
    fn help_text_names_every_code() {
        for code in ["0 ", "1 ", "2 ", "3 ", "69 ", "124", "130"] {
            assert!(EXIT_CODES_HELP.contains(code));
        }
    }
}
