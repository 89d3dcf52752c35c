"""`list_operation_targets` on both clients: a fleet operation's targets a
page at a time, each sandbox once, with its state and why it is behind."""

from __future__ import annotations

import asyncio

import pytest

from conftest import POLICY, Gateway
from openshell import (
    AsyncClient,
    InvalidArgument,
    NotFound,
    OperationState,
    OperationTargets,
    Target,
    UpdateMode,
)


def test_targets_page_once_each_with_why(fresh_gateway: Gateway) -> None:
    client = fresh_gateway.client()
    ids = sorted(client.create_sandbox(f"t-{i}", policy=POLICY).sandbox.id for i in range(3))
    op = client.update_config(
        Target.global_(), settings={"log_level": "debug"}, mode=UpdateMode.COMMIT_ONLY
    ).operation

    seen = []
    token = None
    while True:
        page = client.list_operation_targets(op.id, page_size=2, page_token=token)
        assert isinstance(page, OperationTargets)
        assert len(page.targets) <= 2
        seen += page.targets
        token = page.next_page_token
        if token is None:
            break
    assert [t.sandbox_id for t in seen] == ids
    assert page.counts.targets == 3
    for target in seen:
        assert target.state == OperationState.PENDING
        # No supervisor ever connected.
        assert target.reason == "no session"
        assert target.workspace == "default"
        assert target.to_dict()["sandbox_name"] == target.sandbox_name
    assert client.list_operation_targets(op.id, states=["FAILED"]).targets == []

    with pytest.raises(NotFound):
        client.list_operation_targets("op-00000000-0000-0000-0000-000000000000")
    with pytest.raises(InvalidArgument) as err:
        client.list_operation_targets(op.id, page_size=1001)
    assert "page_size" in str(err.value)

    async def main() -> OperationTargets:
        return await AsyncClient(fresh_gateway.endpoint, fresh_gateway.token).list_operation_targets(
            op.id, states=[OperationState.PENDING]
        )

    pending = asyncio.run(main())
    assert [t.sandbox_id for t in pending.targets] == ids
