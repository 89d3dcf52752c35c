# Type stubs for the Rust extension module `openshell._native`.
# Keep in step with sdk-python/src: tests/test_typing.py runs mypy's stubtest
# against the built module (which fails on drift; tests/stubtest-allowlist.txt
# lists the few stub-only names, each with why) and mypy --strict over code
# that uses every name here.

from datetime import datetime
from types import TracebackType
from typing import Any, Callable, Literal, Mapping, Sequence, final, overload

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
from typing_extensions import Self

# What pyo3 lists in the module's __all__: every name the module adds.
__all__ = [
    "AsyncClient",
    "Attachment",
    "CONTRACT_ENUMS",
    "Client",
    "ComponentDelivery",
    "CreatedSandbox",
    "CredentialExpiry",
    "DeletedSandbox",
    "DeliveryEvent",
    "DryRunResult",
    "FleetProgress",
    "GatewayInfo",
    "MiddlewareReadiness",
    "Operation",
    "OperationTarget",
    "OperationTargets",
    "PolicyChange",
    "PolicyDiff",
    "PolicyRevision",
    "Provider",
    "ProviderWrite",
    "RuntimeReadiness",
    "Sandbox",
    "SandboxLogEvent",
    "SandboxLogLine",
    "SandboxLogWatch",
    "SandboxLogs",
    "SandboxPolicy",
    "ScopeSettings",
    "SessionInspection",
    "SessionSummary",
    "Setting",
    "SettingDefinition",
    "SettingDiff",
    "TERMINAL_OPERATION_STATES",
    "Target",
    "UpdateResult",
    "__version__",
]

__version__: str

CONTRACT_ENUMS: dict[str, tuple[str, ...]]
"""Each enum of ``openshell._enums`` by class name, with its members' wire
names in wire order, as the Rust SDK defines them: what those classes are
built from."""

TERMINAL_OPERATION_STATES: frozenset[str]
"""The wire names of the operation states an operation never leaves, by the
Rust SDK's rule: what ``OperationState.is_terminal`` reads."""

ProgressCallback = Callable[["Operation"], object]
"""Called with every update of a wait, oldest first. With ``AsyncClient`` it
runs on the event loop and may be ``async``; an exception it raises ends the
wait (the operation keeps going on the gateway)."""

@final
class Target:
    """Where an ``update_config`` change applies."""

    @staticmethod
    def sandbox(sandbox: str, workspace: str | None = None) -> Target:
        """One sandbox by ``NAME``, ``ID`` or ``WORKSPACE/NAME``."""
    @staticmethod
    def workspace(name: str) -> Target:
        """Every sandbox of a workspace (workspace-scope settings)."""
    @staticmethod
    def global_() -> Target:
        """Everything: global settings and the global policy."""
    @property
    def kind(self) -> TargetKind: ...
    @property
    def name(self) -> str | None:
        """Sandbox reference or workspace name; ``None`` for the global target."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class FleetProgress:
    """Per-target counts of a fleet (workspace, global or provider) operation."""

    @property
    def targets(self) -> int:
        """Sandboxes the write affected, recorded at commit."""
    @property
    def applied(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def inactive(self) -> int: ...
    @property
    def superseded(self) -> int: ...
    @property
    def cancelled(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class OperationTarget:
    """One sandbox an operation targets, and how far the change got there."""

    @property
    def sandbox_id(self) -> str: ...
    @property
    def sandbox_name(self) -> str | None:
        """None when the sandbox record is gone."""
    @property
    def workspace(self) -> str | None: ...
    @property
    def state(self) -> OperationState: ...
    @property
    def outcome(self) -> ApplyOutcome: ...
    @property
    def reason(self) -> str | None:
        """The error of a terminal target, or ``no session`` for a live one no supervisor is connected for."""
    @property
    def updated_at(self) -> str | None: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class OperationTargets:
    """One page of an operation's targets, in sandbox id order."""

    @property
    def targets(self) -> list[OperationTarget]: ...
    @property
    def next_page_token(self) -> str | None:
        """Pass it as ``page_token`` for the next page; None after the last one."""
    @property
    def counts(self) -> FleetProgress:
        """Counts over every target of the operation, whatever the filter and page."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class Operation:
    """A durable record of one committed write and how far its delivery got."""

    @property
    def id(self) -> str:
        """``op-`` followed by a UUID."""
    @property
    def target_kind(self) -> TargetKind: ...
    @property
    def target(self) -> str:
        """Sandbox id, workspace name or provider id; empty for global."""
    @property
    def state(self) -> OperationState: ...
    @property
    def outcome(self) -> ApplyOutcome:
        """The supervisor's outcome, set once terminal."""
    @property
    def error(self) -> str | None:
        """Sanitized error text, at most 1 KiB."""
    @property
    def policy_revision(self) -> int:
        """Policy revision this operation waits to see applied; 0 when policy was untouched."""
    @property
    def settings_revision(self) -> int:
        """Settings revision of the written scope; 0 when settings were untouched."""
    @property
    def global_policy_revision(self) -> int: ...
    @property
    def no_op(self) -> bool:
        """The write changed nothing; the operation tracks the current revision."""
    @property
    def idempotency_key(self) -> str | None: ...
    @property
    def created_at(self) -> str | None:
        """RFC 3339 timestamp, like every ``*_at`` attribute."""
    @property
    def updated_at(self) -> str | None: ...
    @property
    def completed_at(self) -> str | None: ...
    @property
    def wait_timed_out(self) -> bool:
        """A server-side wait hit its deadline while the operation was still live."""
    @property
    def fleet(self) -> FleetProgress | None:
        """Per-target counts for fleet operations; ``None`` for a single sandbox."""
    @property
    def caller(self) -> str:
        """Principal that issued the write."""
    @property
    def is_terminal(self) -> bool:
        """True once the operation reached a final state."""
    def threshold_met(self, fraction: float) -> bool:
        """For fleet operations: whether at least ``fraction`` of the targets applied."""
    def result(
        self,
        timeout: float | None = None,
        *,
        threshold: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Operation:
        """Blocks (releasing the GIL) until the operation is terminal and returns it.

        Raises ``OperationFailed`` if it ended FAILED and ``WaitTimeout`` if
        ``timeout`` seconds (default 60) pass first. Other final states
        (SUPERSEDED, INACTIVE, CANCELLED) are returned: check ``state``.
        """
    async def result_async(
        self,
        timeout: float | None = None,
        *,
        threshold: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Operation:
        """The coroutine form of :meth:`result`."""
    def to_dict(self) -> dict[str, Any]:
        """The JSON shape the CLI prints with ``-o json``."""

@final
class UpdateResult:
    """What ``update_config`` returns for a write."""

    @property
    def operation(self) -> Operation: ...
    @property
    def idempotent_replay(self) -> bool:
        """An earlier request with the same idempotency key was found; nothing was written."""
    @property
    def kept_static_sections(self) -> list[str]:
        """Static sections (``filesystem_policy``, ``landlock``, ``process``) the sandbox
        policy omitted, kept from the sandbox's latest revision."""
    @property
    def validate_only(self) -> Literal[False]: ...
    @property
    def merge_notes(self) -> list[str]:
        """With ``policy_edits``: what the merge kept or rewrote instead of doing it
        literally, one line each (empty for an idempotent replay)."""
    @property
    def shadowed_by_global_policy(self) -> int | None:
        """A sandbox policy written while a global policy is set: that global policy's
        revision, which replaces it (the operation ends ``INACTIVE`` with
        ``SHADOWED_BY_GLOBAL``); ``None`` when no global policy is set."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class DryRunResult:
    """What ``update_config(..., validate_only=True)`` returns: nothing was written."""

    @property
    def operation(self) -> None:
        """Always ``None``: a dry run creates no operation."""
    @property
    def idempotent_replay(self) -> bool:
        """The idempotency key matches an earlier, equal request: the write would change nothing."""
    @property
    def kept_static_sections(self) -> list[str]:
        """Static sections the sandbox policy omits that the write would keep."""
    @property
    def validate_only(self) -> Literal[True]: ...
    @property
    def policy_diff(self) -> PolicyDiff | None:
        """How the policy differs from the target's current one; ``None`` without a policy."""
    @property
    def setting_changes(self) -> list[SettingDiff]:
        """The settings that would change at the target's scope."""
    @property
    def merge_notes(self) -> list[str]:
        """With ``policy_edits``: what the merge would keep or rewrite, one line each."""
    @property
    def shadowed_by_global_policy(self) -> int | None:
        """A sandbox policy checked while a global policy is set: that global policy's
        revision, which would replace it; ``None`` when no global policy is set."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class PolicyDiff:
    """What a policy would change compared with the target's current policy, rule by rule."""

    @property
    def added_policies(self) -> list[str]:
        """Network policies (by map key) only in the new policy."""
    @property
    def removed_policies(self) -> list[str]:
        """Network policies only in the current policy."""
    @property
    def changed_policies(self) -> list[PolicyChange]:
        """Network policies on both sides whose content differs."""
    @property
    def changed_static_sections(self) -> list[str]:
        """Static sections whose content would change (a first policy, or the global one)."""
    @property
    def changed_sections(self) -> list[str]:
        """Other top-level sections that differ, e.g. ``network_middlewares``."""
    @property
    def current_revision(self) -> int:
        """The revision compared against; 0 when the target has no policy yet."""
    @property
    def current_policy_hash(self) -> str | None: ...
    @property
    def new_policy_hash(self) -> str:
        """The hash the stored policy would have, kept sections included."""
    def is_empty(self) -> bool:
        """True when the policy would change nothing."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class PolicyChange:
    """One network policy on both sides with different content.

    Endpoints are named by host, ports and path (``api.example.com:443/v1/**``),
    or ``endpoints[i]`` when they have no host.
    """

    @property
    def name(self) -> str: ...
    @property
    def added_endpoints(self) -> list[str]: ...
    @property
    def removed_endpoints(self) -> list[str]: ...
    @property
    def changed_endpoints(self) -> list[str]: ...
    @property
    def changed_fields(self) -> list[str]:
        """Fields other than ``endpoints`` that differ, e.g. ``binaries``."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class SettingDiff:
    """One setting a validate-only update would change at the target's scope."""

    @property
    def key(self) -> str: ...
    @property
    def old_value(self) -> SettingValue | None:
        """Stored at the scope now; ``None`` when the key is not set there."""
    @property
    def new_value(self) -> SettingValue | None:
        """What it would be; ``None`` when the change deletes it."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class Sandbox:
    """A sandbox record."""

    @property
    def id(self) -> str:
        """``sb-`` followed by a UUID."""
    @property
    def name(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def lifecycle(self) -> SandboxLifecycle: ...
    @property
    def policy_revision(self) -> int:
        """Latest policy revision of the sandbox itself; 0 when it has none."""
    @property
    def settings_revision(self) -> int: ...
    @property
    def attachment_epoch(self) -> int: ...
    @property
    def providers(self) -> list[str]:
        """Names of the attached providers, sorted."""
    @property
    def created_at(self) -> str | None: ...
    @property
    def updated_at(self) -> str | None: ...
    @property
    def applied_policy_revision(self) -> int:
        """Policy revision the supervisor last reported applied; 0 when none."""
    @property
    def applied_policy_hash(self) -> str | None:
        """Hash of that applied policy; None when none has been applied."""
    @property
    def quarantine_reason(self) -> str | None:
        """Set while the sandbox is quarantined (a failed apply under ``fail_closed``: all
        network access denied until a configuration applies): the reason reported."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class CreatedSandbox:
    """What ``create_sandbox`` returns."""

    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def supervisor_credential(self) -> str:
        """The only copy of the supervisor credential; ``repr`` never shows it."""
    @property
    def operation(self) -> Operation | None:
        """Operation of the initial policy, when one was given."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class DeletedSandbox:
    """What ``delete_sandbox`` returns."""

    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def cancelled_operations(self) -> int:
        """Pending operations that ended CANCELLED."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class Attachment:
    """What ``attach_provider`` returns."""

    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def operation(self) -> Operation | None:
        """Tracks delivery of the new provider environment."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class Provider:
    """A provider record: credential names, never values."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def provider_type(self) -> str: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def credential_names(self) -> list[str]: ...
    @property
    def revision(self) -> int: ...
    @property
    def expires_at(self) -> str | None: ...
    @property
    def attached_sandbox_ids(self) -> list[str]: ...
    @property
    def created_at(self) -> str | None:
        """When it was created (RFC 3339)."""
    @property
    def updated_at(self) -> str | None:
        """When it was last written: an update or a credential refresh (RFC 3339)."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class ProviderWrite:
    """What ``create_provider`` returns."""

    @property
    def provider(self) -> Provider: ...
    @property
    def operation(self) -> Operation | None:
        """Fleet operation over the attaching sandboxes, when any attach it."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class SessionSummary:
    """One connected supervisor session."""

    @property
    def sandbox_id(self) -> str: ...
    @property
    def sandbox_name(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def mode(self) -> DeliveryMode: ...
    @property
    def supervisor_version(self) -> str: ...
    @property
    def protocol_revision(self) -> int: ...
    @property
    def replica_id(self) -> str: ...
    @property
    def connected_at(self) -> str | None: ...
    @property
    def last_heartbeat_at(self) -> str | None: ...
    @property
    def policy_revision(self) -> int:
        """The sandbox's desired (latest) policy revision; 0 when none."""
    @property
    def applied_policy_revision(self) -> int:
        """Policy revision the supervisor last reported applied; 0 when none."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class ComponentDelivery:
    """Delivery state of one component (``sandbox_config`` or ``provider_environment``)."""

    @property
    def component(self) -> str: ...
    @property
    def desired(self) -> str: ...
    @property
    def sent(self) -> str: ...
    @property
    def sent_at(self) -> str | None: ...
    @property
    def acked(self) -> str: ...
    @property
    def ack_status(self) -> str: ...
    @property
    def acked_at(self) -> str | None: ...
    @property
    def dirty(self) -> bool: ...
    @property
    def lane(self) -> str | None: ...
    @property
    def held(self) -> bool: ...
    @property
    def last_failure(self) -> str | None: ...
    @property
    def backoff(self) -> str | None: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class DeliveryEvent:
    """One recent delivery event."""

    @property
    def at(self) -> str | None: ...
    @property
    def text(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class SessionInspection:
    """How configuration reaches one sandbox, and what is wrong with it if anything."""

    @property
    def sandbox(self) -> Sandbox | None: ...
    @property
    def gateway_mode(self) -> str: ...
    @property
    def connected(self) -> bool: ...
    @property
    def negotiated_mode(self) -> DeliveryMode: ...
    @property
    def negotiated_reason(self) -> str: ...
    @property
    def supervisor_version(self) -> str: ...
    @property
    def protocol_revision(self) -> int: ...
    @property
    def supports_config_snapshots(self) -> bool: ...
    @property
    def supports_config_apply(self) -> bool: ...
    @property
    def owner_replica(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def connected_at(self) -> str | None: ...
    @property
    def last_heartbeat_at(self) -> str | None: ...
    @property
    def components(self) -> list[ComponentDelivery]: ...
    @property
    def pending_operations(self) -> list[Operation]: ...
    @property
    def recent_events(self) -> list[DeliveryEvent]: ...
    @property
    def hints(self) -> list[str]:
        """Plain-language hints for each abnormal state found."""
    @property
    def last_report(self) -> str | None: ...
    @property
    def last_report_at(self) -> str | None: ...
    @property
    def runtime_readiness(self) -> RuntimeReadiness | None:
        """Whether the connected supervisor started its workload, and the remote middleware it
        needs; `None` when it reported nothing."""
    @property
    def credential_expiry(self) -> list[CredentialExpiry]:
        """When each credential of the sandbox's providers expires, soonest first."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class CredentialExpiry:
    """One credential of an attached provider and when it stops being valid (its name,
    never its value)."""

    @property
    def name(self) -> str:
        """The environment variable's name."""
    @property
    def provider(self) -> str:
        """The provider it comes from."""
    @property
    def expires_at(self) -> str | None:
        """When it expires (RFC 3339)."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class RuntimeReadiness:
    """A supervisor's word on starting its workload: it connects to every remote middleware the
    policy requires first."""

    @property
    def workload_started(self) -> bool:
        """False while an unreachable `fail_closed` middleware holds the workload back."""
    @property
    def middlewares(self) -> list[MiddlewareReadiness]: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class MiddlewareReadiness:
    """One remote middleware a supervisor's policy requires."""

    @property
    def name(self) -> str:
        """The policy entry's key."""
    @property
    def implementation(self) -> str:
        """The implementation it names."""
    @property
    def endpoint(self) -> str | None:
        """`HOST:PORT`; `None` when the implementation is not registered on the supervisor."""
    @property
    def reachable(self) -> bool: ...
    @property
    def fail_closed(self) -> bool:
        """`on_error: fail_closed`: while unreachable, the workload does not start."""
    @property
    def error(self) -> str | None:
        """Why it is unreachable."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class GatewayInfo:
    """Description of the gateway a client talks to."""

    @property
    def version(self) -> str: ...
    @property
    def config_delivery_mode(self) -> str:
        """``"poll"`` or ``"push"``."""
    @property
    def store_backend(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""
    @property
    def replica_id(self) -> str: ...
    @property
    def protocol_revision(self) -> int: ...
    @property
    def replicas(self) -> list[str]: ...
    @property
    def sessions(self) -> int: ...
    @property
    def started_at(self) -> str | None: ...
    @property
    def answered_at(self) -> str | None: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class PolicyRevision:
    """One stored policy revision."""

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox's id; ``None`` for the global policy."""
    @property
    def revision(self) -> int: ...
    @property
    def policy_hash(self) -> str:
        """Lowercase hex SHA-256 of the policy's canonical form."""
    @property
    def policy_yaml(self) -> str | None:
        """Canonical YAML, accepted unchanged by ``update_config``; ``None`` in history lists."""
    @property
    def created_at(self) -> str | None: ...
    @property
    def operation_id(self) -> str | None:
        """The operation that created the revision."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class SandboxPolicy:
    """A sandbox's policy revision together with what is in effect."""

    @property
    def policy(self) -> PolicyRevision: ...
    @property
    def effective_source(self) -> PolicySource:
        """``GLOBAL`` while a global policy replaces the sandbox's own."""
    @property
    def global_policy_revision(self) -> int:
        """The global policy revision in effect, 0 when none."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class Setting:
    """One setting as stored at a scope, or as effective for a sandbox."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> bool | int | str | None:
        """Typed by the registry; ``None`` when unset."""
    @property
    def scope(self) -> SettingScope:
        """The scope the value comes from (``DEFAULT``: the registry default)."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class ScopeSettings:
    """The settings of one scope, as ``get_settings`` returns them."""

    @property
    def scope(self) -> SettingScope: ...
    @property
    def values(self) -> list[Setting]:
        """The values stored at that scope."""
    @property
    def revision(self) -> int: ...
    @property
    def effective(self) -> list[Setting]:
        """Sandbox scope only: every registry key with its effective value and source."""
    def to_dict(self) -> dict[str, Any]: ...

@final
class SettingDefinition:
    """A key of the settings registry."""

    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> str:
        """``"bool"``, ``"int"``, ``"string"`` or ``"enum"``."""
    @property
    def default_value(self) -> bool | int | str | None: ...
    @property
    def allowed_values(self) -> list[str]:
        """The allowed values of an enum key."""
    @property
    def description(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...

SettingValue = str | int | bool

@final
class Client:
    """A blocking connection to one gateway.

    Connects on the first call. Every call releases the GIL while it waits,
    so other threads keep running, and Ctrl-C interrupts a long wait. Safe to
    share between threads.

    ``timeout`` bounds each call in seconds (waits get their wait time on
    top); ``ca_cert_pem`` is the CA to trust for an ``https://`` endpoint.
    """

    def __new__(
        cls,
        endpoint: str | None = None,
        token: str | None = None,
        ca_cert_pem: str | bytes | None = None,
        timeout: float | None = None,
    ) -> Self:
        """Left out, ``endpoint``, ``token`` and the CA come from ``OPENSHELL_GATEWAY``
        (else ``http://127.0.0.1:7070``), ``OPENSHELL_TOKEN`` and ``OPENSHELL_CA_CERT``
        (a PEM file), as for the CLI."""
    @property
    def endpoint(self) -> str: ...
    def close(self) -> None:
        """Drops the connection; later calls raise ``RuntimeError``."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def create_sandbox(
        self, name: str, *, workspace: str | None = None, policy: str | None = None
    ) -> CreatedSandbox:
        """Creates a sandbox, optionally with its first policy (which fixes the static sections)."""
    def get_sandbox(self, sandbox: str) -> Sandbox:
        """Reads a sandbox by ``NAME``, ``ID`` or ``WORKSPACE/NAME``."""
    def list_sandboxes(
        self, *, workspace: str | None = None, include_deleted: bool = False
    ) -> list[Sandbox]: ...
    def delete_sandbox(self, sandbox: str) -> DeletedSandbox:
        """Deletes a sandbox; its pending operations end CANCELLED."""
    def create_provider(
        self,
        name: str,
        provider_type: str,
        *,
        workspace: str | None = None,
        env: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> ProviderWrite: ...
    def attach_provider(self, sandbox: str, provider: str) -> Attachment: ...
    def set_sandbox_lifecycle(
        self, sandbox: str, lifecycle: SandboxLifecycle | str
    ) -> Sandbox:
        """``STOPPED`` stops a sandbox, ``PENDING`` restarts it."""
    def update_provider(
        self,
        provider: str,
        *,
        workspace: str | None = None,
        env: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> ProviderWrite:
        """Replaces a provider's values; sandboxes that attach it receive the new environment."""
    def delete_provider(self, provider: str, *, workspace: str | None = None) -> None:
        """Deletes a provider; refused while a sandbox attaches it."""
    def get_provider(self, provider: str, *, workspace: str | None = None) -> Provider: ...
    def list_providers(self, *, workspace: str | None = None) -> list[Provider]: ...
    def detach_provider(self, sandbox: str, provider: str) -> Attachment: ...
    def get_sandbox_policy(self, sandbox: str, revision: int | None = None) -> SandboxPolicy:
        """The sandbox's latest policy revision, or ``revision`` when given."""
    def list_sandbox_policies(self, sandbox: str, *, limit: int = 0) -> list[PolicyRevision]:
        """Policy revisions, newest first, without their YAML (``limit`` 0: the gateway's default)."""
    def get_global_policy(self, revision: int | None = None) -> SandboxPolicy:
        """The global policy's latest revision, or ``revision``; one that cleared it has no ``policy_yaml``."""
    def list_global_policies(self, *, limit: int = 0) -> list[PolicyRevision]:
        """The global policy's revisions, newest first, without their YAML."""
    def get_settings(self, target: Target | str) -> ScopeSettings:
        """The settings stored at a scope; for a sandbox also every key's effective value."""
    def list_setting_definitions(self) -> list[SettingDefinition]:
        """The settings registry: every key, its type and default."""
    @overload
    def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: Literal[False] = False,
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> UpdateResult:
        """Writes policy and/or settings as one durable operation.

        ``target`` is a :class:`Target` or a sandbox name. With
        ``WAIT_FOR_APPLY`` the gateway waits up to ``wait_timeout`` seconds
        (default 60, at most 600); a passed deadline is not an error: the
        operation comes back live with ``wait_timed_out`` set. A failed apply
        is not an error either; inspect ``operation.state`` or call
        ``operation.result()``. With an ``idempotency_key`` a retry returns
        the original operation (``idempotent_replay``) and writes nothing.
        A sandbox policy that omits ``filesystem_policy``, ``landlock`` or
        ``process`` keeps the sandbox's current section
        (``kept_static_sections``).

        With ``validate_only=True`` nothing is written: the gateway runs every
        check of the write against what is stored and returns a
        :class:`DryRunResult` with what would change, and no operation.

        ``policy_edits`` (a sandbox target only, instead of ``policy``) edits
        the sandbox's latest policy on the gateway in the CLI's forms
        (:class:`PolicyEdits`); what the merge did differently from the
        literal request is in ``merge_notes``. With ``expected_revision`` a
        target whose policy revision has moved on raises
        :class:`FailedPrecondition` and nothing is written.
        """
    @overload
    def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: Literal[True],
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> DryRunResult: ...
    @overload
    def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: bool = False,
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> UpdateResult | DryRunResult: ...
    def get_operation(self, id: str) -> Operation: ...
    def wait_for_apply(
        self,
        id: str,
        timeout: float | None = None,
        threshold: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Operation:
        """Follows an operation until it is terminal (or ``threshold`` of a
        fleet applied) and returns it, whatever its final state.

        Raises ``WaitTimeout`` (carrying the operation) if ``timeout`` seconds
        (default 60) pass first; the operation keeps going on the gateway.
        """
    def list_operations(
        self,
        *,
        sandbox: str | None = None,
        states: Sequence[OperationState | str] | None = None,
        limit: int = 0,
    ) -> list[Operation]:
        """The newest operations, at most ``limit`` (0: the gateway's default of 100)."""
    def list_operation_targets(
        self,
        id: str,
        *,
        states: Sequence[OperationState | str] | None = None,
        page_size: int = 0,
        page_token: str | None = None,
    ) -> OperationTargets:
        """One page of an operation's targets: each sandbox, its state and why."""
    def list_sessions(self) -> list[SessionSummary]: ...
    def inspect_session(self, sandbox: str) -> SessionInspection: ...
    def gateway_info(self) -> GatewayInfo: ...
    def get_sandbox_logs(
        self,
        sandbox: str,
        *,
        lines: int = 0,
        since_ms: int = 0,
        sources: Sequence[str] | None = None,
        min_level: str | None = None,
    ) -> SandboxLogs:
        """A sandbox's recent log lines (provider values masked), oldest first."""
    def watch_sandbox_logs(
        self,
        sandbox: str,
        *,
        lines: int = 0,
        since_ms: int = 0,
        sources: Sequence[str] | None = None,
        min_level: str | None = None,
    ) -> SandboxLogWatch:
        """Follows a sandbox's log lines; iterate the result until you ``break``."""

@final
class AsyncClient:
    """The asyncio twin of :class:`Client`: the same methods, as coroutines.

    Cancelling a task that awaits a call stops waiting only: an operation
    already committed keeps going on the gateway.
    """

    def __new__(
        cls,
        endpoint: str | None = None,
        token: str | None = None,
        ca_cert_pem: str | bytes | None = None,
        timeout: float | None = None,
    ) -> Self:
        """Left out, ``endpoint``, ``token`` and the CA come from ``OPENSHELL_GATEWAY``
        (else ``http://127.0.0.1:7070``), ``OPENSHELL_TOKEN`` and ``OPENSHELL_CA_CERT``
        (a PEM file), as for the CLI."""
    @property
    def endpoint(self) -> str: ...
    def close(self) -> None:
        """Drops the connection; later calls raise ``RuntimeError``."""
    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    async def create_sandbox(
        self, name: str, *, workspace: str | None = None, policy: str | None = None
    ) -> CreatedSandbox: ...
    async def get_sandbox(self, sandbox: str) -> Sandbox: ...
    async def list_sandboxes(
        self, *, workspace: str | None = None, include_deleted: bool = False
    ) -> list[Sandbox]: ...
    async def delete_sandbox(self, sandbox: str) -> DeletedSandbox: ...
    async def create_provider(
        self,
        name: str,
        provider_type: str,
        *,
        workspace: str | None = None,
        env: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> ProviderWrite: ...
    async def attach_provider(self, sandbox: str, provider: str) -> Attachment: ...
    async def set_sandbox_lifecycle(
        self, sandbox: str, lifecycle: SandboxLifecycle | str
    ) -> Sandbox: ...
    async def update_provider(
        self,
        provider: str,
        *,
        workspace: str | None = None,
        env: Mapping[str, str] | None = None,
        credentials: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> ProviderWrite: ...
    async def delete_provider(self, provider: str, *, workspace: str | None = None) -> None: ...
    async def get_provider(self, provider: str, *, workspace: str | None = None) -> Provider: ...
    async def list_providers(self, *, workspace: str | None = None) -> list[Provider]: ...
    async def detach_provider(self, sandbox: str, provider: str) -> Attachment: ...
    async def get_sandbox_policy(self, sandbox: str, revision: int | None = None) -> SandboxPolicy: ...
    async def list_sandbox_policies(self, sandbox: str, *, limit: int = 0) -> list[PolicyRevision]: ...
    async def get_global_policy(self, revision: int | None = None) -> SandboxPolicy: ...
    async def list_global_policies(self, *, limit: int = 0) -> list[PolicyRevision]: ...
    async def get_settings(self, target: Target | str) -> ScopeSettings: ...
    async def list_setting_definitions(self) -> list[SettingDefinition]: ...
    @overload
    async def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: Literal[False] = False,
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> UpdateResult: ...
    @overload
    async def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: Literal[True],
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> DryRunResult: ...
    @overload
    async def update_config(
        self,
        target: Target | str,
        *,
        policy: str | None = None,
        settings: Mapping[str, SettingValue] | None = None,
        delete_settings: Sequence[str] | None = None,
        clear_global_policy: bool = False,
        mode: UpdateMode | str | None = UpdateMode.COMMIT_ONLY,
        idempotency_key: str | None = None,
        wait_timeout: float | None = None,
        threshold: float | None = None,
        validate_only: bool = False,
        policy_edits: PolicyEdits | None = None,
        expected_revision: int | None = None,
    ) -> UpdateResult | DryRunResult: ...
    async def get_operation(self, id: str) -> Operation: ...
    async def wait_for_apply(
        self,
        id: str,
        timeout: float | None = None,
        threshold: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Operation: ...
    async def list_operations(
        self,
        *,
        sandbox: str | None = None,
        states: Sequence[OperationState | str] | None = None,
        limit: int = 0,
    ) -> list[Operation]: ...
    async def list_operation_targets(
        self,
        id: str,
        *,
        states: Sequence[OperationState | str] | None = None,
        page_size: int = 0,
        page_token: str | None = None,
    ) -> OperationTargets: ...
    async def list_sessions(self) -> list[SessionSummary]: ...
    async def inspect_session(self, sandbox: str) -> SessionInspection: ...
    async def gateway_info(self) -> GatewayInfo: ...
    async def get_sandbox_logs(
        self,
        sandbox: str,
        *,
        lines: int = 0,
        since_ms: int = 0,
        sources: Sequence[str] | None = None,
        min_level: str | None = None,
    ) -> SandboxLogs: ...
    def watch_sandbox_logs(
        self,
        sandbox: str,
        *,
        lines: int = 0,
        since_ms: int = 0,
        sources: Sequence[str] | None = None,
        min_level: str | None = None,
    ) -> SandboxLogWatch:
        """Follows a sandbox's log lines; ``async for`` over the result."""

@final
class SandboxLogLine:
    """One log line of a sandbox; provider values arrive masked (``***``)."""

    @property
    def time(self) -> str | None: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def level(self) -> str: ...
    @property
    def source(self) -> str:
        """``"supervisor"`` or ``"workload"``."""
    @property
    def target(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def fields(self) -> dict[str, str]: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class SandboxLogs:
    """Recent log lines of a sandbox, and how many were lost on the way."""

    @property
    def lines(self) -> list[SandboxLogLine]: ...
    @property
    def buffer_total(self) -> int: ...
    @property
    def supervisor_dropped_lines(self) -> int: ...
    @property
    def gateway_dropped_lines(self) -> int: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class SandboxLogEvent:
    """One item of a followed sandbox's logs: a ``line``, or ``dropped`` lines."""

    @property
    def kind(self) -> Literal["line", "dropped"]: ...
    @property
    def line(self) -> SandboxLogLine | None: ...
    @property
    def dropped_lines(self) -> int: ...
    @property
    def message(self) -> str | None: ...
    def to_dict(self) -> dict[str, Any]: ...

@final
class SandboxLogWatch:
    """A followed sandbox's logs, for ``for`` and ``async for``; it does not end
    by itself while the sandbox lives."""

    def __iter__(self) -> Self: ...
    def __next__(self) -> SandboxLogEvent: ...
    def __aiter__(self) -> Self: ...
    async def __anext__(self) -> SandboxLogEvent: ...
    def cancel(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
