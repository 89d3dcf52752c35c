"""The contract's enums as Python enums.

Each member's value is its stable wire name (``"APPLIED"``), the same text the
CLI prints with ``-o json``, so members compare equal to those strings and
round-trip through JSON. The native module converts to these classes by value,
so a name the gateway adds later arrives as ``UNSPECIFIED`` rather than failing.

The members and the terminal states are not written here: the classes are
built from the Rust SDK's own lists (``_native.CONTRACT_ENUMS`` and
``_native.TERMINAL_OPERATION_STATES``), so they cannot drift from the client
core. ``_enums.pyi`` spells them out for type checkers; the stub test checks it
against these classes.
"""

from __future__ import annotations

import enum

from openshell import _native


class _WireEnum(str, enum.Enum):
    """A str-valued enum whose ``str()`` is the wire name."""

    def __str__(self) -> str:
        return str(self.value)


class _OperationStateRule(_WireEnum):
    """The behaviour of ``OperationState``; its members come from Rust."""

    @property
    def is_terminal(self) -> bool:
        """True for the states an operation never leaves."""
        return self.value in _native.TERMINAL_OPERATION_STATES


def _build(name: str, doc: str, base: type[_WireEnum] = _WireEnum) -> type[_WireEnum]:
    members = [(member, member) for member in _native.CONTRACT_ENUMS[name]]
    # module and qualname make members picklable and their repr name this module.
    cls: type[_WireEnum] = base(name, members, module=__name__, qualname=name)
    cls.__doc__ = doc
    return cls


OperationState = _build(
    "OperationState",
    "State of a durable operation. Terminal states are final.",
    _OperationStateRule,
)
ApplyOutcome = _build("ApplyOutcome", "What the supervisor reported for a terminal operation.")
UpdateMode = _build("UpdateMode", "How ``update_config`` returns.")
TargetKind = _build("TargetKind", "What an operation or a :class:`Target` addresses.")
SandboxLifecycle = _build("SandboxLifecycle", "Lifecycle of a sandbox as the gateway records it.")
DeliveryMode = _build("DeliveryMode", "How configuration reaches a supervisor session.")
PolicySource = _build("PolicySource", "Where a sandbox's effective policy comes from.")
SettingScope = _build(
    "SettingScope", "The scope a setting is stored at, or its effective value comes from."
)


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
