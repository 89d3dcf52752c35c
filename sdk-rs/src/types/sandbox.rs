//! Sandboxes: how callers name them and what the gateway records about them.

use std::fmt;

use openshell_proto::datamodel::v1::WorkspaceSelector;
use openshell_proto::datamodel::v1::workspace_selector::Selection;
use openshell_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use super::{Operation, SandboxLifecycle};
use crate::timefmt;

/// Names a sandbox by id (`sb-…`) or by name within a workspace.
///
/// `From<&str>` accepts `NAME`, `ID` or `WORKSPACE/NAME`; the slash form is
/// unambiguous because neither names (DNS labels) nor ids contain `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SandboxRef {
    pub id_or_name: String,
    /// Workspace used to resolve a name; `None` means the gateway's default.
    pub workspace: Option<String>,
}

impl SandboxRef {
    pub fn new(id_or_name: impl Into<String>) -> Self {
        Self {
            id_or_name: id_or_name.into(),
            workspace: None,
        }
    }

    pub fn in_workspace(id_or_name: impl Into<String>, workspace: impl Into<String>) -> Self {
        Self {
            id_or_name: id_or_name.into(),
            workspace: Some(workspace.into()),
        }
    }

    /// The workspace as upstream's requests select it; `None` leaves the gateway's default.
    pub(crate) fn workspace_scope(&self) -> Option<WorkspaceSelector> {
        workspace_selector(self.workspace.as_deref())
    }

    pub(crate) fn to_proto(&self) -> pb::SandboxRef {
        pb::SandboxRef {
            id_or_name: self.id_or_name.clone(),
            workspace: self.workspace.clone().unwrap_or_default(),
        }
    }
}

impl From<&str> for SandboxRef {
    fn from(text: &str) -> Self {
        match text.split_once('/') {
            Some((workspace, name)) if !workspace.is_empty() => Self::in_workspace(name, workspace),
            Some((_, name)) => Self::new(name),
            None => Self::new(text),
        }
    }
}

impl From<String> for SandboxRef {
    fn from(text: String) -> Self {
        Self::from(text.as_str())
    }
}

impl fmt::Display for SandboxRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.workspace {
            Some(ws) => write!(f, "{ws}/{}", self.id_or_name),
            // Only a leading `/` keeps such a name from reading back as `WORKSPACE/NAME`.
            None if self.id_or_name.contains('/') => write!(f, "/{}", self.id_or_name),
            None => f.write_str(&self.id_or_name),
        }
    }
}

/// A sandbox record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sandbox {
    /// `sb-` followed by a UUID.
    pub id: String,
    pub name: String,
    pub workspace: String,
    pub lifecycle: SandboxLifecycle,
    /// Latest policy revision of the sandbox itself; 0 when it has none.
    pub policy_revision: u64,
    /// Sandbox-scope settings revision; 0 when never written.
    pub settings_revision: u64,
    /// Increases on every provider attach or detach.
    pub attachment_epoch: u64,
    /// Names of the attached providers, sorted.
    pub providers: Vec<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    /// Policy revision the sandbox's supervisor last reported applied; 0
    /// when none has been. Behind `policy_revision` while a change is on its
    /// way, or when the supervisor rejected it or is not connected.
    #[serde(default)]
    pub applied_policy_revision: u64,
    /// Hash of that applied policy; `None` when none has been applied.
    #[serde(default)]
    pub applied_policy_hash: Option<String>,
    /// Set while the sandbox is quarantined (a failed apply under
    /// `policy_validation_failure_mode = fail_closed`: all network access denied until a
    /// configuration applies): the reason its supervisor reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quarantine_reason: Option<String>,
}

/// Upstream's selector of one workspace; `None` (the gateway's default) for no name.
pub(crate) fn workspace_selector(workspace: Option<&str>) -> Option<WorkspaceSelector> {
    workspace.map(|name| WorkspaceSelector {
        selection: Some(Selection::Workspace(name.to_owned())),
    })
}

impl From<pb::Sandbox> for Sandbox {
    fn from(p: pb::Sandbox) -> Self {
        let metadata = p.metadata.unwrap_or_default();
        Self {
            id: metadata.id,
            name: metadata.name,
            workspace: metadata.workspace,
            lifecycle: p.lifecycle.into(),
            policy_revision: p.policy_revision,
            settings_revision: p.settings_revision,
            attachment_epoch: p.attachment_epoch,
            providers: p.spec.map(|spec| spec.providers).unwrap_or_default(),
            created_at: timefmt::timestamp(metadata.created_time),
            updated_at: timefmt::timestamp(p.updated_at),
            applied_policy_revision: p.applied_policy_revision,
            applied_policy_hash: Some(p.applied_policy_hash).filter(|h| !h.is_empty()),
            quarantine_reason: Some(p.quarantine_reason).filter(|r| !r.is_empty()),
        }
    }
}

/// The supervisor credential issued at sandbox creation.
///
/// Unlike [`Secret`](crate::Secret) it serializes, because the gateway keeps
/// only its hash and the creator must be able to print or save this one copy;
/// `Debug` still redacts it so logs never hold it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SupervisorCredential(String);

impl SupervisorCredential {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The credential text, to hand to the sandbox's supervisor.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SupervisorCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SupervisorCredential(***)")
    }
}

/// What `create_sandbox` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatedSandbox {
    pub sandbox: Sandbox,
    /// The only copy of the supervisor credential.
    pub supervisor_credential: SupervisorCredential,
    /// Operation of the initial policy, when one was given.
    pub operation: Option<Operation>,
}

/// What `delete_sandbox` returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletedSandbox {
    /// The sandbox, now `DELETED`.
    pub sandbox: Sandbox,
    /// Pending operations that ended `CANCELLED`.
    pub cancelled_operations: u32,
}

/// What attaching or detaching a provider returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attachment {
    /// The sandbox with its new attachment epoch.
    pub sandbox: Sandbox,
    /// Operation tracking delivery of the new provider environment.
    pub operation: Option<Operation>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_workspace_slash_name() {
        assert_eq!(
            SandboxRef::from("team/demo"),
            SandboxRef::in_workspace("demo", "team")
        );
        assert_eq!(SandboxRef::from("demo"), SandboxRef::new("demo"));
        assert_eq!(SandboxRef::from("/demo"), SandboxRef::new("demo"));
        assert_eq!(SandboxRef::from("team/demo").to_string(), "team/demo");
    }

    /// Found by the `cli_parsers` fuzz target: `/a/b` names `a/b` in the default workspace,
    /// and printed as `a/b` it read back as `b` in workspace `a`.
    #[test]
    fn a_printed_reference_reads_back_as_the_same_reference() {
        for text in [
            "/demoknndn\0\0/\0\0\0\0o\0",
            "/a/b",
            "a/b/c",
            "ws/",
            "/",
            "",
        ] {
            let reference = SandboxRef::from(text);
            assert_eq!(
                SandboxRef::from(reference.to_string()),
                reference,
                "{text:?}"
            );
        }
        assert_eq!(SandboxRef::from("/a/b").to_string(), "/a/b");
    }

    #[test]
    fn credential_debug_is_redacted_but_serializes() {
        let created = CreatedSandbox {
            sandbox: Sandbox::from(pb::Sandbox::default()),
            supervisor_credential: SupervisorCredential::new("cred-xyz"),
            operation: None,
        };
        assert!(!format!("{created:?}").contains("cred-xyz"));
        let json = serde_json::to_value(&created).unwrap();
        assert_eq!(json["supervisor_credential"], "cred-xyz");
    }
}
