//! Operator authorization: what a token's role and workspace allow.
//!
//! Every operator method of service `OpenShell` needs one permission, named
//! in [`RPC_PERMISSIONS`]; the authentication layer checks the token's role
//! against it before the call reaches its handler, and refuses a method the
//! table does not name (`UNIMPLEMENTED`: the service has none such). A token
//! limited to a workspace is further checked by the handler once it knows
//! where the target lives (a sandbox named by id is in whichever workspace
//! its record says): [`Principal::check_in`] for a
//! target in a workspace, [`Principal::check_global`] for a global one, and
//! [`Principal::list_scope`] for a list, which such a token sees only of its
//! own workspace.
//!
//! Every refusal is `PERMISSION_DENIED` naming the token, its role, the
//! permission it lacks and where, e.g. "token 'ci' (role viewer) lacks
//! permission sandbox.write on workspace 'team'".

use std::fmt;

use tonic::Status;

/// What a token may do: each role has the permissions of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads, and follows operations, sessions and logs.
    Viewer,
    /// Also writes sandboxes, sandbox and workspace configuration, providers
    /// and attachments.
    Operator,
    /// Also writes the global policy and settings and manages tokens.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }

    /// The least role holding `permission`.
    pub fn least_for(permission: Permission) -> Role {
        use Permission::*;
        match permission {
            SandboxRead | ProviderRead | SettingsRead | OperationRead | SessionRead | LogsRead
            | GatewayRead => Role::Viewer,
            SandboxWrite | ProviderWrite | AttachmentWrite | ConfigWrite => Role::Operator,
            GlobalWrite | TokenManage => Role::Admin,
        }
    }

    pub fn allows(self, permission: Permission) -> bool {
        self >= Role::least_for(permission)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing a call does, as refusals and the operator guide name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Sandboxes and their policy history.
    SandboxRead,
    /// Create, delete, stop and start sandboxes.
    SandboxWrite,
    /// Providers (credential names only).
    ProviderRead,
    /// Create, update and delete providers.
    ProviderWrite,
    /// Attach and detach providers.
    AttachmentWrite,
    /// Settings at any scope, and the settings registry.
    SettingsRead,
    /// Policy and settings of a sandbox or a workspace.
    ConfigWrite,
    /// The global policy and global settings.
    GlobalWrite,
    /// Operations: read, wait for, list, their targets.
    OperationRead,
    /// Supervisor sessions and their delivery diagnostics.
    SessionRead,
    /// Sandbox log lines, one-shot or followed.
    LogsRead,
    /// The gateway's description.
    GatewayRead,
    /// Create, list and revoke operator tokens.
    TokenManage,
}

impl Permission {
    pub const ALL: [Permission; 13] = [
        Permission::SandboxRead,
        Permission::SandboxWrite,
        Permission::ProviderRead,
        Permission::ProviderWrite,
        Permission::AttachmentWrite,
        Permission::SettingsRead,
        Permission::ConfigWrite,
        Permission::GlobalWrite,
        Permission::OperationRead,
        Permission::SessionRead,
        Permission::LogsRead,
        Permission::GatewayRead,
        Permission::TokenManage,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SandboxRead => "sandbox.read",
            Self::SandboxWrite => "sandbox.write",
            Self::ProviderRead => "provider.read",
            Self::ProviderWrite => "provider.write",
            Self::AttachmentWrite => "attachment.write",
            Self::SettingsRead => "settings.read",
            Self::ConfigWrite => "config.write",
            Self::GlobalWrite => "global.write",
            Self::OperationRead => "operation.read",
            Self::SessionRead => "session.read",
            Self::LogsRead => "logs.read",
            Self::GatewayRead => "gateway.read",
            Self::TokenManage => "token.manage",
        }
    }

    /// Granted only to tokens without a workspace: what it touches spans
    /// every workspace.
    pub fn is_global(self) -> bool {
        matches!(self, Self::GlobalWrite | Self::TokenManage)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The permission each operator method of service `OpenShell` needs. An
/// `UpdateConfig` of the global scope needs [`Permission::GlobalWrite`]
/// besides, checked by its handler. The supervisor methods
/// (`auth::SUPERVISOR_METHODS`) are not here: the supervisor credential
/// authorizes them, for the sandbox it was issued to only.
pub const RPC_PERMISSIONS: &[(&str, Permission)] = &[
    ("CreateSandbox", Permission::SandboxWrite),
    ("GetSandbox", Permission::SandboxRead),
    ("ListSandboxes", Permission::SandboxRead),
    ("DeleteSandbox", Permission::SandboxWrite),
    ("SetSandboxLifecycle", Permission::SandboxWrite),
    ("CreateProvider", Permission::ProviderWrite),
    ("UpdateProvider", Permission::ProviderWrite),
    ("DeleteProvider", Permission::ProviderWrite),
    ("GetProvider", Permission::ProviderRead),
    ("ListProviders", Permission::ProviderRead),
    ("AttachProvider", Permission::AttachmentWrite),
    ("DetachProvider", Permission::AttachmentWrite),
    ("GetSandboxPolicy", Permission::SandboxRead),
    ("ListSandboxPolicies", Permission::SandboxRead),
    ("GetSandboxPolicyStatus", Permission::SandboxRead),
    ("GetSettings", Permission::SettingsRead),
    ("ListSettingDefinitions", Permission::SettingsRead),
    ("UpdateConfig", Permission::ConfigWrite),
    ("GetOperation", Permission::OperationRead),
    ("WaitForApply", Permission::OperationRead),
    ("ListOperations", Permission::OperationRead),
    ("ListOperationTargets", Permission::OperationRead),
    ("ListSessions", Permission::SessionRead),
    ("InspectSession", Permission::SessionRead),
    ("GetGatewayInfo", Permission::GatewayRead),
    ("GetSandboxLogs", Permission::LogsRead),
    ("WatchSandbox", Permission::LogsRead),
    ("CreateToken", Permission::TokenManage),
    ("ListTokens", Permission::TokenManage),
    ("RevokeToken", Permission::TokenManage),
];

/// The permission operator method `method` needs; None for a method the
/// table does not name, which is refused as `UNIMPLEMENTED`.
pub fn permission_for(method: &str) -> Option<Permission> {
    RPC_PERMISSIONS
        .iter()
        .find(|(name, _)| *name == method)
        .map(|(_, p)| *p)
}

/// The authenticated operator: the token's name (the caller recorded on
/// operations), role and workspace. Put into request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub role: Role,
    /// The only workspace the token may touch; None: every workspace.
    pub workspace: Option<String>,
    /// A token created through the API, which can be revoked while the gateway runs (a
    /// configured one lasts as long as the configuration).
    pub stored: bool,
}

impl Principal {
    fn who(&self) -> String {
        match &self.workspace {
            Some(ws) => format!(
                "token '{}' (role {}, workspace '{ws}')",
                self.name, self.role
            ),
            None => format!("token '{}' (role {})", self.name, self.role),
        }
    }

    fn denied(&self, permission: Permission, place: &str) -> Status {
        Status::permission_denied(format!(
            "{} lacks permission {permission}{place}",
            self.who()
        ))
    }

    /// The role check alone, made before a call reaches its handler.
    pub fn check(&self, permission: Permission) -> Result<(), Status> {
        if self.role.allows(permission) {
            Ok(())
        } else {
            Err(self.denied(permission, ""))
        }
    }

    /// `permission` on a target in `workspace`.
    pub fn check_in(&self, permission: Permission, workspace: &str) -> Result<(), Status> {
        let in_scope = self.workspace.as_deref().is_none_or(|own| own == workspace);
        if self.role.allows(permission) && in_scope && !permission.is_global() {
            Ok(())
        } else {
            Err(self.denied(permission, &format!(" on workspace '{workspace}'")))
        }
    }

    /// `permission` on something of every workspace (the global policy and
    /// settings, tokens, an operation over every sandbox): a token limited to
    /// a workspace never has it.
    pub fn check_global(&self, permission: Permission) -> Result<(), Status> {
        if self.role.allows(permission) && self.workspace.is_none() {
            Ok(())
        } else {
            Err(self.denied(permission, " on the global scope"))
        }
    }

    /// The workspace a list is limited to: the requested one (None: every
    /// workspace), or for a token limited to a workspace, that workspace,
    /// whether requested or left empty; another one is refused.
    pub fn list_scope<'a>(
        &'a self,
        permission: Permission,
        requested: Option<&'a str>,
    ) -> Result<Option<&'a str>, Status> {
        match (self.workspace.as_deref(), requested) {
            (None, requested) => Ok(requested),
            (Some(own), None) => Ok(Some(own)),
            (Some(_), Some(requested)) => {
                self.check_in(permission, requested)?;
                Ok(Some(requested))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The operator methods of services `OpenShell` and `ConfigPlane`, read from their protos.
    fn service_methods() -> Vec<String> {
        let sources = [
            (
                include_str!("../../proto/openshell/v1/openshell.proto"),
                "service OpenShell {",
            ),
            (
                include_str!("../../proto/openshell/v1/config_plane.proto"),
                "service ConfigPlane {",
            ),
        ];
        let mut methods = Vec::new();
        for (proto, opening) in sources {
            let service = proto
                .split(opening)
                .nth(1)
                .and_then(|rest| rest.split("\n}").next())
                .expect("the service in its proto");
            methods.extend(
                service
                    .lines()
                    .filter_map(|line| line.trim().strip_prefix("rpc "))
                    .filter_map(|rest| rest.split('(').next())
                    .map(|name| name.trim().to_string())
                    .filter(|name| {
                        !crate::auth::SUPERVISOR_METHODS.contains(&name.as_str())
                            && !crate::auth::OPEN_METHODS.contains(&name.as_str())
                    }),
            );
        }
        methods
    }

    #[test]
    fn every_operator_method_of_the_service_has_a_permission() {
        let methods = service_methods();
        assert!(methods.len() >= 30, "{methods:?}");
        let unmapped: Vec<&String> = methods
            .iter()
            .filter(|m| permission_for(m).is_none())
            .collect();
        assert!(unmapped.is_empty(), "no permission for {unmapped:?}");
        // And the table names no method the service lacks (a typo maps nothing).
        for (name, _) in RPC_PERMISSIONS {
            assert!(methods.iter().any(|m| m == name), "{name} is not a method");
        }
    }

    #[test]
    fn every_permission_is_needed_by_some_method_or_scope() {
        for permission in Permission::ALL {
            let used = RPC_PERMISSIONS.iter().any(|(_, p)| *p == permission)
                || permission == Permission::GlobalWrite;
            assert!(used, "{permission} is granted but never checked");
        }
    }

    fn principal(role: Role, workspace: Option<&str>) -> Principal {
        Principal {
            name: "ci".into(),
            role,
            workspace: workspace.map(str::to_string),
            stored: false,
        }
    }

    #[test]
    fn roles_grow_viewer_operator_admin() {
        assert!(Role::Viewer.allows(Permission::OperationRead));
        assert!(!Role::Viewer.allows(Permission::SandboxWrite));
        assert!(Role::Operator.allows(Permission::SandboxWrite));
        assert!(Role::Operator.allows(Permission::ConfigWrite));
        assert!(!Role::Operator.allows(Permission::GlobalWrite));
        assert!(!Role::Operator.allows(Permission::TokenManage));
        for permission in Permission::ALL {
            assert!(Role::Admin.allows(permission));
        }
    }

    #[test]
    fn refusals_name_token_role_permission_and_workspace() {
        let viewer = principal(Role::Viewer, None);
        let err = viewer
            .check_in(Permission::SandboxWrite, "team")
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            err.message(),
            "token 'ci' (role viewer) lacks permission sandbox.write on workspace 'team'"
        );
        let scoped = principal(Role::Operator, Some("team"));
        scoped.check_in(Permission::SandboxWrite, "team").unwrap();
        let err = scoped
            .check_in(Permission::SandboxWrite, "other")
            .unwrap_err();
        assert_eq!(
            err.message(),
            "token 'ci' (role operator, workspace 'team') lacks permission sandbox.write on workspace 'other'"
        );
        let scoped_admin = principal(Role::Admin, Some("team"));
        let err = scoped_admin
            .check_global(Permission::GlobalWrite)
            .unwrap_err();
        assert!(err.message().contains("global.write on the global scope"));
        assert!(
            scoped_admin
                .check_in(Permission::TokenManage, "team")
                .is_err()
        );
        principal(Role::Admin, None)
            .check_global(Permission::GlobalWrite)
            .unwrap();
    }

    #[test]
    fn a_scoped_token_lists_only_its_workspace() {
        let scoped = principal(Role::Viewer, Some("team"));
        assert_eq!(
            scoped.list_scope(Permission::SandboxRead, None).unwrap(),
            Some("team")
        );
        assert_eq!(
            scoped
                .list_scope(Permission::SandboxRead, Some("team"))
                .unwrap(),
            Some("team")
        );
        assert!(
            scoped
                .list_scope(Permission::SandboxRead, Some("other"))
                .is_err()
        );
        let everywhere = principal(Role::Viewer, None);
        assert_eq!(
            everywhere
                .list_scope(Permission::SandboxRead, None)
                .unwrap(),
            None
        );
    }
}
