//! Upstream's `workspace_scope` selector read the one way every call reads it: unset or
//! empty addresses the workspace "default", as upstream's gateway resolves it.

use openshell_proto::datamodel::v1::WorkspaceSelector;
use openshell_proto::datamodel::v1::workspace_selector::Selection;
use tonic::Status;

use crate::error::GatewayError;
use crate::lifecycle::workspace_or_default;

/// The one workspace a call that addresses one object names in `field`. Every workspace
/// at once is refused: an object is looked up in one.
pub(super) fn addressed<'a>(
    field: &str,
    selector: Option<&'a WorkspaceSelector>,
) -> Result<&'a str, Status> {
    match selector.and_then(|s| s.selection.as_ref()) {
        None => Ok(workspace_or_default("")),
        Some(Selection::Workspace(name)) => Ok(workspace_or_default(name)),
        Some(Selection::AllWorkspaces(_)) => Err(GatewayError::invalid(
            format!("{field}.all_workspaces"),
            "this call addresses one object: name its workspace, or leave the selector unset for \"default\"",
        )
        .into()),
    }
}

/// The workspace a list call covers; `None` when it asks for every workspace.
pub(super) fn listed(selector: Option<&WorkspaceSelector>) -> Option<&str> {
    match selector.and_then(|s| s.selection.as_ref()) {
        None => Some(workspace_or_default("")),
        Some(Selection::Workspace(name)) => Some(workspace_or_default(name)),
        Some(Selection::AllWorkspaces(_)) => None,
    }
}
