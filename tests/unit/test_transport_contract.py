"""The SQS carrier keeps the Transport contract, and the factory picks it from settings.

mypy checks the contract statically where app.transport.create returns an SqsTransport as
a Transport; this test checks it at run time too, parameter by parameter, so a carrier that
drifts from the protocol fails here before a caller finds out."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from app import errors, transport
from app.settings import config
from app.transport import base
from app.transport.sqs import SqsTransport

pytestmark = pytest.mark.unit

PROTOCOL_METHODS = sorted(
    name
    for name, member in vars(base.Transport).items()
    if inspect.iscoroutinefunction(member) and not name.startswith("_")
)


def test_the_contract_names_what_the_callers_need() -> None:
    assert {
        "send_jobs",
        "receive",
        "delete_batch",
        "change_visibility",
        "send_dead_letter",
        "send_raw_dead_letter",
        "receive_dead_letters",
        "delete_dead_letters",
        "send_moved",
        "start_move",
        "move_status",
        "depth",
        "dead_letter_depth",
        "create_queues",
        "source_arn",
        "open",
        "close",
    } <= set(PROTOCOL_METHODS)


@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_sqs_accepts_every_call_the_protocol_allows(name: str) -> None:
    wanted = inspect.signature(getattr(base.Transport, name)).parameters
    impl = getattr(SqsTransport, name)
    assert inspect.iscoroutinefunction(impl), name
    given = inspect.signature(impl).parameters
    for param in wanted.values():
        assert param.name in given, f"{name}: no parameter {param.name}"
        assert given[param.name].kind == param.kind, f"{name}: {param.name} is passed differently"
        assert given[param.name].default == param.default, f"{name}: {param.name}'s default"
    # Whatever SQS adds beyond the protocol must be optional, or a protocol call would fail.
    for extra in given.keys() - wanted.keys():
        assert given[extra].default is not inspect.Parameter.empty, f"{name}: {extra} required"


def test_the_factory_builds_the_carrier_settings_name() -> None:
    carrier = transport.create(config.Settings(transport="sqs"))
    assert isinstance(carrier, SqsTransport)
    assert isinstance(carrier, transport.Transport)


def test_a_carrier_that_does_not_exist_stops_start_up() -> None:
    with pytest.raises(errors.ConfigError, match="TASKLEASE_TRANSPORT"):
        config.load(transport="kafka")


async def _closed_call() -> None:
    await SqsTransport(config.Settings(queue_url="http://127.0.0.1:1/q")).depth()


def test_a_carrier_not_opened_says_so() -> None:
    with pytest.raises(errors.QueueError, match="not open"):
        asyncio.run(_closed_call())
