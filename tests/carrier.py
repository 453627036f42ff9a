"""Carrier-neutral Givens and Thens: what a test does to a queue by hand (a message sent
from outside tasklease, a raw receive, a delete, a re-timing, a queue's counts), on SQS
through the test's boto3 client or the transport, on Redis as the Redis carrier itself
reads and writes its streams (redis_streams.fields_for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.conftest import Stack


def send_raw(
    stack: Stack,
    body: str,
    attributes: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    url: str | None = None,
) -> str:
    """A message sent by someone other than tasklease onto ``url`` (the source queue by
    default), with its own message attributes; returns its MessageId."""
    url = url or stack.settings.queue
    if stack.on_redis:
        import redis

        from app.transport.redis_streams import fields_for

        with redis.Redis.from_url(str(stack.settings.redis_url), decode_responses=True) as r:
            return str(r.xadd(url, dict(fields_for(body, attributes))))
    extra = {"MessageAttributes": dict(attributes)} if attributes else {}
    return str(stack.sqs.send_message(QueueUrl=url, MessageBody=body, **extra)["MessageId"])


def receive_raw(
    stack: Stack,
    url: str | None = None,
    *,
    max_messages: int = 10,
    wait: int = 1,
    visibility: int | None = None,
) -> list[dict[str, Any]]:
    """Messages received from ``url`` (the source queue by default) as the transport
    receives them (ReceiveMessage's shape, with their attributes)."""
    where = url or stack.settings.queue
    return list(
        stack.carrier(
            lambda t: t.receive(
                url=where, max_messages=max_messages, wait_seconds=wait, visibility=visibility
            )
        )
    )


def receive_all(
    stack: Stack, url: str | None = None, *, rounds: int = 3, visibility: int = 30
) -> list[dict[str, Any]]:
    """Every message on ``url`` once: receives until one finds nothing (or ``rounds``)."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        got = receive_raw(stack, url, visibility=visibility)
        seen.update((m["MessageId"], m) for m in got)
        if not got:
            break
    return list(seen.values())


def delete_raw(stack: Stack, receipt_handle: str, url: str | None = None) -> None:
    """Delete a message received by hand from ``url`` (the source queue by default)."""
    where = url or stack.settings.queue
    if stack.on_redis:
        failed = stack.carrier(lambda t: t.delete_batch([receipt_handle]))
    else:
        failed = stack.carrier(lambda t: t.delete_batch([receipt_handle], url=where))
    assert failed == [], f"could not delete {receipt_handle!r}"


def change_visibility(
    stack: Stack, receipt_handle: str, seconds: float, url: str | None = None
) -> None:
    """Re-time a message received by hand (visible again after ``seconds``)."""
    where = url or stack.settings.queue
    if stack.on_redis:
        stack.carrier(lambda t: t.change_visibility(receipt_handle, seconds))
    else:
        stack.carrier(lambda t: t.change_visibility(receipt_handle, seconds, url=where))


def depth(stack: Stack, url: str | None = None) -> dict[str, int]:
    """A queue's approximate counts (ApproximateNumberOfMessages, ...NotVisible,
    ...Delayed): ``url``'s, or the source queues' summed."""
    return dict(stack.carrier(lambda t: t.depth(url)))


def dead_letter_depth(stack: Stack) -> dict[str, int]:
    return dict(stack.carrier(lambda t: t.dead_letter_depth()))


def broken_settings(stack: Stack, **overrides: Any) -> Any:
    """Settings whose sends fail: on SQS a queue that does not exist, on Redis a server
    that is not there (a stream is made by its first write, so a missing one cannot)."""
    if stack.on_redis:
        return stack.with_settings(redis_url="redis://127.0.0.1:9/0", **overrides)
    return stack.with_settings(queue_url=stack.settings.queue + "-does-not-exist", **overrides)


def broken_env(stack: Stack) -> dict[str, str]:
    """broken_settings as a process's environment."""
    if stack.on_redis:
        return {"TASKLEASE_REDIS_URL": "redis://127.0.0.1:9/0"}
    return {"TASKLEASE_QUEUE_URL": stack.settings.queue + "-does-not-exist"}


def broken_dlq_settings(stack: Stack) -> Any:
    """Settings whose dead-letter sends fail while the source queue works: on SQS a DLQ
    that does not exist, on Redis a key that is not a stream (XADD answers WRONGTYPE)."""
    if stack.on_redis:
        import redis

        key = stack.settings.dlq + "-not-a-stream"
        with redis.Redis.from_url(str(stack.settings.redis_url)) as r:
            r.set(key, "not a stream")
        return stack.with_settings(dlq_url=key)
    return stack.with_settings(dlq_url=stack.settings.dlq + "-does-not-exist")
