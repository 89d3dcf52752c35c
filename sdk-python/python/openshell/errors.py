"""Exceptions raised by the OpenShell SDK.

Every error an SDK call can fail with is an :class:`OpenShellError` whose
``code`` is the stable code of the Rust core (``"NOT_FOUND"``,
``"INVALID_ARGUMENT"``, …). The native module picks the class here from the
core's error in one place, so the CLI, the Node SDK and this package agree on
what each failure is called.

A failed *operation* is not an error of the call that returned it: inspect
``operation.state``, or call ``operation.result()``, which raises
:class:`OperationFailed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from openshell._native import Operation


@dataclass(frozen=True)
class Violation:
    """One validation finding, addressed by field path.

    ``field`` looks like ``network_policies.github.endpoints[0].port``; it is
    empty for a problem with a document as a whole.
    """

    field: str
    message: str


class OpenShellError(Exception):
    """Base class of every SDK error."""

    code: str = "UNKNOWN"
    """Stable, machine-readable code, e.g. ``"NOT_FOUND"`` or ``"INTERNAL"``."""

    def __init__(self, message: str, *, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgument(OpenShellError, ValueError):
    """The request was rejected as invalid; ``violations`` names each bad field."""

    code = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        violations: Sequence[Violation] = (),
    ) -> None:
        super().__init__(message, code=code)
        self.violations: list[Violation] = list(violations)


class InvalidArgumentType(InvalidArgument, TypeError):
    """An argument of the wrong type, refused before anything was sent.

    Both an :class:`InvalidArgument` (``code`` ``"INVALID_ARGUMENT"``, one
    violation whose ``field`` is the argument) and a ``TypeError``, so
    ``except TypeError`` keeps working. A value of the right type that is out
    of range is a plain :class:`InvalidArgument`.
    """


class NotFound(OpenShellError, LookupError):
    """The named sandbox, provider or operation does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(OpenShellError):
    """A name is already taken."""

    code = "ALREADY_EXISTS"


class FailedPrecondition(OpenShellError):
    """The current state forbids the write."""

    code = "FAILED_PRECONDITION"


class Unauthenticated(OpenShellError):
    """No operator token, or a wrong one."""

    code = "UNAUTHENTICATED"


class Unavailable(OpenShellError):
    """The gateway cannot be reached or asked to retry later."""

    code = "UNAVAILABLE"


class DeadlineExceeded(OpenShellError, TimeoutError):
    """The client's per-call timeout passed before the gateway answered."""

    code = "DEADLINE_EXCEEDED"


class TransportError(OpenShellError):
    """Connection setup failed: bad endpoint, CA certificate or TLS configuration."""

    code = "TRANSPORT"


class WaitTimeout(OpenShellError, TimeoutError):
    """A wait ended at its deadline while the operation was still live.

    The operation keeps going on the gateway: wait on it again with
    ``client.wait_for_apply(err.operation_id)`` or ``err.operation.result()``.
    """

    code = "WAIT_TIMED_OUT"

    def __init__(
        self, message: str, *, operation: Operation, code: Optional[str] = None
    ) -> None:
        super().__init__(message, code=code)
        self.operation = operation

    @property
    def operation_id(self) -> str:
        return self.operation.id


class OperationFailed(OpenShellError):
    """``Operation.result()`` found the operation ended ``FAILED``.

    The supervisor rejected the change and kept its last-known-good
    configuration; ``operation.error`` says why.
    """

    code = "OPERATION_FAILED"

    def __init__(
        self, message: str, *, operation: Operation, code: Optional[str] = None
    ) -> None:
        super().__init__(message, code=code)
        self.operation = operation

    @property
    def operation_id(self) -> str:
        return self.operation.id


__all__ = [
    "AlreadyExists",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidArgument",
    "InvalidArgumentType",
    "NotFound",
    "OpenShellError",
    "OperationFailed",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "Violation",
    "WaitTimeout",
]
