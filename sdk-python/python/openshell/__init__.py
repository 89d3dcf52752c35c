"""OpenShell Python SDK.

Operate an OpenShell gateway from Python: create sandboxes, write policies
and settings as durable operations, and wait until supervisors applied them.

Two clients share one Rust core (the same one the ``openshell`` CLI uses):

- :class:`Client` blocks, releasing the GIL while it waits;
- :class:`AsyncClient` has the same methods as coroutines.

Quick start::

    from openshell import Client, Target, UpdateMode

    # endpoint and token default to $OPENSHELL_GATEWAY and $OPENSHELL_TOKEN
    with Client("http://127.0.0.1:7070", token="...") as client:
        result = client.update_config(
            Target.sandbox("demo"),
            policy=open("policy.yaml").read(),
            mode=UpdateMode.WAIT_FOR_APPLY,
        )
        print(result.operation.state)
"""

from openshell._edits import PolicyEdits
from openshell._enums import (
    ApplyOutcome,
    DeliveryMode,
    OperationState,
    PolicySource,
    SandboxLifecycle,
    SettingScope,
    TargetKind,
    UpdateMode,
)
from openshell._native import (
    AsyncClient,
    Attachment,
    Client,
    ComponentDelivery,
    CreatedSandbox,
    DeletedSandbox,
    DeliveryEvent,
    DryRunResult,
    FleetProgress,
    GatewayInfo,
    CredentialExpiry,
    MiddlewareReadiness,
    Operation,
    OperationTarget,
    OperationTargets,
    PolicyChange,
    PolicyDiff,
    PolicyRevision,
    Provider,
    ProviderWrite,
    RuntimeReadiness,
    Sandbox,
    SandboxLogEvent,
    SandboxLogLine,
    SandboxLogs,
    SandboxLogWatch,
    SandboxPolicy,
    ScopeSettings,
    SessionInspection,
    SessionSummary,
    Setting,
    SettingDefinition,
    SettingDiff,
    Target,
    UpdateResult,
    __version__,
)
from openshell.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvalidArgumentType,
    NotFound,
    OpenShellError,
    OperationFailed,
    TransportError,
    Unauthenticated,
    Unavailable,
    Violation,
    WaitTimeout,
)

__all__ = [
    "AlreadyExists",
    "ApplyOutcome",
    "AsyncClient",
    "Attachment",
    "Client",
    "ComponentDelivery",
    "CreatedSandbox",
    "DeadlineExceeded",
    "DeletedSandbox",
    "DeliveryEvent",
    "DeliveryMode",
    "DryRunResult",
    "FailedPrecondition",
    "FleetProgress",
    "GatewayInfo",
    "InvalidArgument",
    "InvalidArgumentType",
    "CredentialExpiry",
    "MiddlewareReadiness",
    "NotFound",
    "OpenShellError",
    "Operation",
    "OperationFailed",
    "OperationState",
    "OperationTarget",
    "OperationTargets",
    "PolicyChange",
    "PolicyDiff",
    "PolicyEdits",
    "PolicyRevision",
    "PolicySource",
    "Provider",
    "ProviderWrite",
    "RuntimeReadiness",
    "Sandbox",
    "SandboxLogEvent",
    "SandboxLogLine",
    "SandboxLogWatch",
    "SandboxLogs",
    "SandboxPolicy",
    "SandboxLifecycle",
    "ScopeSettings",
    "SessionInspection",
    "SessionSummary",
    "Setting",
    "SettingDefinition",
    "SettingDiff",
    "SettingScope",
    "Target",
    "TargetKind",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "UpdateMode",
    "UpdateResult",
    "Violation",
    "WaitTimeout",
    "__version__",
]
