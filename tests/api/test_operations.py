"""Every operation of the installed PAI-DLC SDK, called through the SDK: what docs/api.md's
table says of it is what the server does (served, or 404 InvalidAction.NotFound)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import alibabacloud_pai_dlc20201203.models as dlc_models
import pytest
from alibabacloud_pai_dlc20201203.client import Client

from tests.api.conftest import sdk_error

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def operations() -> list[str]:
    """The SDK's operations, as method names (`get_job`)."""
    return sorted(
        name[: -len("_with_options")]
        for name, _ in inspect.getmembers(Client, inspect.isfunction)
        if name.endswith("_with_options") and not name.endswith("_async")
    )


def documented() -> dict[str, str]:
    """Operation name -> what the docs' table says ("served" or "not served …")."""
    text = DOCS.read_text()
    part = text[text.index("### Every PAI-DLC operation") :]
    states: dict[str, str] = {}
    for cells, state in re.findall(r"^\| (`[^|]+`) \| ([^|]+) \|$", part, flags=re.M):
        for name in re.findall(r"`(\w+)`", cells):
            states[name] = state.strip()
    return states


def _call(dlc, op: str):
    method = getattr(dlc, op)
    args = []
    for name, param in inspect.signature(method).parameters.items():
        if name == "request":
            model = param.annotation  # a class, or its name (newer SDKs)
            if isinstance(model, str):
                model = getattr(dlc_models, model.rsplit(".", 1)[-1].strip("'"))
            args.append(model())
        else:
            args.append("dlc-no-such-thing")
    return method(*args)


@pytest.mark.parametrize("op", operations())
def test_the_docs_say_what_each_operation_gets(dlc, op):
    states = documented()
    name = "".join(part.title() for part in op.split("_"))
    assert name in states, f"docs/api.md does not list {name}"
    try:
        _call(dlc, op)
        code = "served"
    except Exception as caught:  # the SDK raises its own error types
        code = sdk_error(SimpleNamespace(value=caught))
    if states[name] == "served":
        assert code != ("InvalidAction.NotFound", 404), name
    else:
        assert states[name].startswith("not served"), states[name]
        assert code == ("InvalidAction.NotFound", 404), (name, code)
