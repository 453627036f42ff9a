"""The local event source: what Lambda's SQS event source mapping does, on one machine.

Long-polls ReceiveMessage (up to 10; from the priorities' queues by weight, see
``EventSource``), builds records in the exact shape Lambda
sends, calls the engine with a context whose ``get_remaining_time_in_millis()``
counts down the configured function timeout, deletes the successes in a batch
and leaves the failures. On SIGTERM/SIGINT it stops receiving and lets the
batches in hand finish; messages received but not yet claimed simply come back
after their visibility timeout, and no attempt is used for them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app import crashpoints, errors
from app.priorities import Priority, Turns
from app.settings.config import Settings
from app.worker.engine import Engine
from app.worker.presence import Presence

log = logging.getLogger(__name__)

# After an infrastructure error, wait before polling again (what the ESM does, roughly).
ERROR_PAUSE_SECONDS = 1.0


class LocalContext:
    """The parts of Lambda's context object the engine uses."""

    def __init__(self, timeout_seconds: float, *, function_name: str = "tasklease-worker") -> None:
        self.deadline = time.monotonic() + timeout_seconds
        self.function_name = function_name
        self.aws_request_id = f"local-{time.time_ns()}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def _attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """A message attribute as Lambda writes it: the value key present only when set,
    binary values as base64 text (the event is JSON)."""
    out: dict[str, Any] = {}
    if value.get("StringValue") is not None:
        out["stringValue"] = value["StringValue"]
    if value.get("BinaryValue") is not None:
        out["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    out["stringListValues"] = list(value.get("StringListValues", []))
    out["binaryListValues"] = [
        base64.b64encode(b).decode() for b in value.get("BinaryListValues", [])
    ]
    out["dataType"] = value.get("DataType", "String")
    return out


def to_record(message: Mapping[str, Any], *, queue_arn: str, region: str) -> dict[str, Any]:
    """A ReceiveMessage message as a record of Lambda's SQS event."""
    body = str(message.get("Body", ""))
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": body,
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": {
            k: _attribute(v) for k, v in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody") or hashlib.md5(body.encode()).hexdigest(),  # noqa: S324 - SQS's own checksum
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


class EventSource:
    """Polls the source queues: with priorities (TASKLEASE_QUEUE_URL_HIGH/_LOW set), each
    turn short-polls the queues in weighted order (``priorities.Turns``, by
    TASKLEASE_PRIORITY_WEIGHTS) and takes the first that has messages, so high-priority
    work is served first and low-priority work keeps its share; when every queue is
    empty it long-polls them all at once, each answer its own batch. With one queue it
    long-polls that queue, as Lambda's event source mapping does."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.stopping = asyncio.Event()
        self.batches = 0

    async def run(self, concurrency: int = 1, *, max_batches: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop)
        # Never frozen between batches: the cancel listener stays connected for good.
        self.engine.cancels.start()
        arns = {p: await self._queue_arn(p) for p in self.engine.queue.priorities()}
        log.info("worker polling", extra={"lease_owner": self.engine.owner, "count": concurrency})
        if self.settings.worker_ready_file:
            await asyncio.to_thread(Path(self.settings.worker_ready_file).touch)
        # Its row in workers: registered now, a heartbeat every few seconds, stopped at the end.
        keeper = self.engine.keeper
        presence = Presence(self.settings, self.engine.db, lambda: len(keeper.running))
        async with presence.kept(), asyncio.TaskGroup() as tg:
            for _ in range(concurrency):
                tg.create_task(self._poll(arns, max_batches))

    async def _queue_arn(self, priority: Priority) -> str:
        """The queue's ARN for the records; retried while the broker is unreachable, so a
        worker started during an outage waits for it instead of exiting."""
        delay = ERROR_PAUSE_SECONDS
        while True:
            try:
                return await self.engine.queue.source_arn(priority)
            except errors.QueueError as exc:
                if self.stopping.is_set():
                    raise
                log.warning("queue not reachable yet, retrying in %.0f s: %s", delay, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    def stop(self) -> None:
        if not self.stopping.is_set():
            log.info("worker stopping: finishing the batches in hand")
            self.stopping.set()

    async def _poll(self, arns: dict[Priority, str], max_batches: int | None) -> None:
        turns = Turns({p: self.settings.weights[p] for p in arns})
        # The long polls in flight, one per queue at most: a queue's long poll watches it
        # while it is empty. A poller whose long poll on one queue brought a batch goes on
        # at once (busy turns, or that queue's next long poll) while its other queues'
        # long polls are still waiting: were it to wait for them, a light load would find
        # no poller listening on its queue for up to TASKLEASE_WAIT_TIME_SECONDS. (A long
        # poll in flight is never cancelled but on stopping: the broker may already have
        # handed it messages.)
        polling: dict[Priority, asyncio.Task[bool]] = {}
        try:
            while not self.stopping.is_set():
                if max_batches is not None and self.batches >= max_batches:
                    return
                if len(arns) > 1 and await self._busy_turn(turns.order(), arns, polling):
                    continue
                # Nothing waiting anywhere (or one queue): long-poll every queue at once.
                for p, arn in arns.items():
                    if p not in polling:
                        polling[p] = self._watch(p, arn)
                done, _ = await asyncio.wait(polling.values(), return_when=asyncio.FIRST_COMPLETED)
                for p in [p for p, task in polling.items() if task in done]:
                    polling.pop(p).result()
        except asyncio.CancelledError:
            for task in polling.values():
                task.cancel()
            raise
        finally:
            # Each ends by itself once stopping is set (_take abandons its receive).
            await asyncio.gather(*polling.values(), return_exceptions=True)

    def _watch(self, priority: Priority, arn: str) -> asyncio.Task[bool]:
        """A long poll of ``priority``'s queue, which takes the queue's next batch the
        moment it comes (and runs it, like any batch)."""
        return asyncio.create_task(self._take(priority, arn, self.settings.wait_time_seconds))

    async def _busy_turn(
        self,
        order: list[Priority],
        arns: dict[Priority, str],
        polling: dict[Priority, asyncio.Task[bool]],
    ) -> bool:
        """One turn: the first queue in ``order`` that has messages gives the batch.
        Whether one did.

        A queue found empty is not short-polled again on each turn: a long poll watches
        it instead (issue 37: with work on normal only, six busy turns in ten began with
        an empty short poll of high, 0.77 empty receives a job on LocalStack), and takes
        its next batch as soon as the broker has it. Once that long poll brought a batch,
        the queue is back in the turns; one that came back empty is watched again."""
        for p in order:
            if self.stopping.is_set():
                return True
            task = polling.get(p)
            if task is not None:
                if not task.done():
                    continue
                if not polling.pop(p).result():
                    polling[p] = self._watch(p, arns[p])
                    continue
            if await self._take(p, arns[p], 0):
                return True
            polling[p] = self._watch(p, arns[p])
        return False

    async def _take(self, priority: Priority, arn: str, wait: int) -> bool:
        """Receive a batch from ``priority``'s queue and invoke the engine with it; whether
        there was one. A receive under way when the worker stops is abandoned."""
        s = self.settings
        receive = asyncio.ensure_future(
            self.engine.queue.receive(
                max_messages=s.batch_size, wait_seconds=wait, priority=priority
            )
        )
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({receive, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not receive.done():
            # Stopping mid-poll: nothing was received, or SQS will make it visible again.
            receive.cancel()
            with contextlib.suppress(asyncio.CancelledError, errors.QueueError):
                await receive
            return False
        stop.cancel()
        try:
            messages = receive.result()
        except errors.QueueError as exc:
            log.warning("receive failed: %s", exc)
            await asyncio.sleep(ERROR_PAUSE_SECONDS)
            return False
        if not messages:
            return False
        self.batches += 1
        await self._invoke(messages, arn)
        return True

    async def _invoke(self, messages: list[dict[str, Any]], arn: str) -> None:
        try:
            await self._handle(messages, arn)
        finally:
            self.engine.queue.forget([m["ReceiptHandle"] for m in messages])

    async def _handle(self, messages: list[dict[str, Any]], arn: str) -> None:
        crashpoints.hit(crashpoints.Point.AFTER_RECEIVE, count=len(messages))
        event = {
            "Records": [to_record(m, queue_arn=arn, region=self.settings.region) for m in messages]
        }
        context = LocalContext(self.settings.function_timeout_seconds)
        try:
            response = await self.engine.handle(event, context)
        except Exception:
            log.exception("handler raised: every message of the batch is left")
            await asyncio.sleep(ERROR_PAUSE_SECONDS)
            return
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        done = [r["receiptHandle"] for r in event["Records"] if r["messageId"] not in failed]
        crashpoints.hit(crashpoints.Point.AFTER_COMPLETION, count=len(done))
        if done:
            try:
                undeleted = await self.engine.queue.delete_batch(done)
            except errors.QueueError as exc:
                log.warning("delete failed; the messages come back and are dropped then: %s", exc)
                return
            if undeleted:
                log.warning("some deletes failed", extra={"count": len(undeleted)})
