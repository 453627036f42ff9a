"""@kind's flow control options (issue 35): each bad one is a ConfigError at start-up
naming the option and what it allows; the good ones make the Flow GET /v1/kinds shows."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app import errors
from app.kinds import JobContext, kind
from app.kinds.flow import Rate


class Message(BaseModel):
    conversation: str


async def reply(ctx: JobContext[None], p: Message) -> str:
    return p.conversation


BAD = [
    pytest.param({"key": "conversation"}, "key=", id="key-not-a-function"),
    pytest.param({"concurrency": 0}, "concurrency=0", id="concurrency-0"),
    pytest.param({"concurrency": 10_001}, "concurrency=10001", id="concurrency-too-many"),
    pytest.param({"concurrency": 1.5}, "concurrency=1.5", id="concurrency-float"),
    pytest.param({"concurrency": True}, "concurrency=True", id="concurrency-bool"),
    pytest.param({"if_active": "interrupt"}, "if_active='interrupt'", id="if-active-unknown"),
    pytest.param({"debounce_seconds": 0}, "debounce_seconds=0", id="debounce-0"),
    pytest.param({"debounce_seconds": float("inf")}, "debounce_seconds=inf", id="debounce-inf"),
    pytest.param({"debounce_seconds": 86_401}, "debounce_seconds=86401", id="debounce-too-long"),
    pytest.param({"debounce_seconds": "2"}, "debounce_seconds='2'", id="debounce-text"),
    pytest.param(
        {"debounce_seconds": 2, "if_active": "reject"}, "not 'reject'", id="debounce-with-reject"
    ),
    pytest.param({"rate": (2,)}, "rate=(2,)", id="rate-one-number"),
    pytest.param({"rate": "2/s"}, "rate='2/s'", id="rate-text"),
    pytest.param({"rate": (0, 1.0)}, "limit must be an int from 1", id="rate-limit-0"),
    pytest.param({"rate": (True, 1.0)}, "limit must be an int from 1", id="rate-limit-bool"),
    pytest.param({"rate": (2, 0)}, "per_seconds more than 0", id="rate-period-0"),
    pytest.param({"rate": Rate(2, float("nan"))}, "per_seconds more than 0", id="rate-nan"),
]


@pytest.mark.parametrize(("options", "named"), BAD)
def test_a_bad_flow_option_is_a_config_error_naming_it(options: dict[str, Any], named: str) -> None:
    declare: Any = kind
    with pytest.raises(errors.ConfigError) as refused:
        declare("bad.flow", **{"key": lambda p: p.conversation, **options})(reply)
    message = str(refused.value)
    assert message.startswith("kind 'bad.flow': "), message
    assert named in message, message


def test_the_good_options_make_the_flow_the_kinds_listing_shows() -> None:
    k = kind("good.flow", key=lambda p: p.conversation, if_active="reject", rate=(3, 60))(reply)
    assert k.flow.to_json() == {
        "keyed": True,
        # A policy other than enqueue is about one active job at a time: concurrency 1.
        "concurrency": 1,
        "if_active": "reject",
        "debounce_seconds": None,
        "rate": {"limit": 3, "per_seconds": 60},
    }
    assert k.flow.decides_at_submit
    plain = kind("plain.flow", concurrency=2)(reply)
    assert plain.flow.to_json()["concurrency"] == 2
    assert not plain.flow.decides_at_submit
