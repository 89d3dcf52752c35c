# Type stubs for `openshell._enums`, whose classes are built at import from
# the Rust SDK's enum lists. The members are spelled out here for type
# checkers; tests/test_typing.py runs mypy's stubtest, which fails when they
# differ from the runtime classes (and so from Rust).

import enum

from typing_extensions import Self

# A base without members, which mypy flags in stubs as possibly elided ones.
class _WireEnum(str, enum.Enum):  # type: ignore[misc]
    """A str-valued enum whose ``str()`` is the wire name."""

    # Enum's own constructor, which the class takes over from str's: a member by value.
    def __new__(cls, value: object) -> Self: ...
    def __str__(self) -> str: ...


class OperationState(_WireEnum):
    """State of a durable operation. Terminal states are final."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    APPLIED = "APPLIED"
    FAILED = "FAILED"
    SUPERSEDED = "SUPERSEDED"
    INACTIVE = "INACTIVE"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        """True for the states an operation never leaves."""


class ApplyOutcome(_WireEnum):
    """What the supervisor reported for a terminal operation."""

    UNSPECIFIED = "UNSPECIFIED"
    APPLIED = "APPLIED"
    DUPLICATE = "DUPLICATE"
    STALE = "STALE"
    RETAINED_LOCAL_OVERRIDE = "RETAINED_LOCAL_OVERRIDE"
    FAILED_RETAINED_LAST_KNOWN_GOOD = "FAILED_RETAINED_LAST_KNOWN_GOOD"
    FAILED_CLOSED = "FAILED_CLOSED"
    LIFECYCLE = "LIFECYCLE"
    SUPERSEDED_BY_NEWER = "SUPERSEDED_BY_NEWER"
    SHADOWED_BY_GLOBAL = "SHADOWED_BY_GLOBAL"


class UpdateMode(_WireEnum):
    """How ``update_config`` returns."""

    COMMIT_ONLY = "COMMIT_ONLY"
    """Return right after commit."""
    WAIT_FOR_APPLY = "WAIT_FOR_APPLY"
    """Wait server-side until the operation is terminal or the wait deadline."""


class TargetKind(_WireEnum):
    """What an operation or a :class:`Target` addresses."""

    UNSPECIFIED = "UNSPECIFIED"
    SANDBOX = "SANDBOX"
    WORKSPACE = "WORKSPACE"
    GLOBAL = "GLOBAL"
    PROVIDER = "PROVIDER"


class SandboxLifecycle(_WireEnum):
    """Lifecycle of a sandbox as the gateway records it."""

    UNSPECIFIED = "UNSPECIFIED"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    DELETED = "DELETED"


class DeliveryMode(_WireEnum):
    """How configuration reaches a supervisor session."""

    UNSPECIFIED = "UNSPECIFIED"
    POLL = "POLL"
    SHADOW_PUSH = "SHADOW_PUSH"
    PUSH = "PUSH"


class PolicySource(_WireEnum):
    """Where a sandbox's effective policy comes from."""

    UNSPECIFIED = "UNSPECIFIED"
    SANDBOX = "SANDBOX"
    GLOBAL = "GLOBAL"
    """The global policy replaces every sandbox policy while set."""
    LOCAL = "LOCAL"
    """A local policy file on the supervisor keeps precedence."""


class SettingScope(_WireEnum):
    """The scope a setting is stored at, or its effective value comes from."""

    UNSPECIFIED = "UNSPECIFIED"
    GLOBAL = "GLOBAL"
    WORKSPACE = "WORKSPACE"
    SANDBOX = "SANDBOX"
    DEFAULT = "DEFAULT"
    """No scope set a value; the registry default is in effect."""


__all__ = [
    "ApplyOutcome",
    "DeliveryMode",
    "OperationState",
    "PolicySource",
    "SandboxLifecycle",
    "SettingScope",
    "TargetKind",
    "UpdateMode",
]
