"""The shape of ``update_config(policy_edits=...)``.

A runtime class rather than a stub-only name, so ``from openshell import
PolicyEdits`` works in code as well as in annotations.
"""

from __future__ import annotations

from typing import Sequence, TypedDict

__all__ = ["PolicyEdits"]


class PolicyEdits(TypedDict, total=False):
    """Incremental edits of a sandbox policy's network rules, in the CLI's
    forms (``openshell policy update --add-endpoint ...``); every key is
    optional. The gateway applies them to the sandbox's latest revision."""

    add_endpoints: Sequence[str]
    """``HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]``, each a rule of its own
    (or merged into the rule that already allows that host and port)."""
    remove_endpoints: Sequence[str]
    """``HOST:PORT``: the port is removed from every endpoint of that host."""
    add_allow: Sequence[str]
    """``HOST:PORT:METHOD:PATH``: an allow rule on the REST endpoint serving ``HOST:PORT``."""
    add_deny: Sequence[str]
    """``HOST:PORT:METHOD:PATH``: a deny rule on the REST endpoint serving ``HOST:PORT``."""
    remove_rules: Sequence[str]
    """Keys of ``network_policies`` entries to remove."""
    binaries: Sequence[str]
    """Binaries the added endpoints are for (only with ``add_endpoints``)."""
    rule_name: str
    """The key of the rule one added endpoint goes to; by default ``allow_HOST_PORT``."""
