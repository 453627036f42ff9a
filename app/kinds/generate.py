"""A streamed model answer as an effect (``ctx.generate``) and a model call's usage.

``await ctx.generate(key, produce)``: a recorded effect ``key`` is returned as is (no
call). Otherwise ``partial`` is the text of this key's chunks that earlier attempts
*recorded* (seq 0..n-1), ``produce(partial)`` is called, and each piece it yields is
streamed as a chunk with seq n, n+1, ... (batched by the runner). Once it ends, the
effect is recorded with the whole text (partial + new), the model and the usage (the
``Usage`` it yielded last). Chunks emitted but not written when a worker died are
produced again by the continuation, since it starts from what was recorded: a reader of
the stream sees one continuous text, no chunk twice, none lost.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app import errors
from app.kinds import threads
from app.kinds.output import Emitted

if TYPE_CHECKING:
    from app.kinds.context import JobContext


@dataclass(frozen=True, slots=True)
class Usage:
    """What one model call used, as its provider reported it."""

    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:
        # A count a provider got wrong (negative, not a whole number, past what the
        # column holds) is not known: None, rather than a failed record or metric.
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31
            if value is not None and not ok:
                object.__setattr__(self, name, None)
        if not isinstance(self.model, str) or not self.model or len(self.model) > 200:
            object.__setattr__(self, "model", str(self.model)[:200] or "unknown")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        }


# produce(partial): the pieces of text that continue ``partial``, then (once) its Usage;
# an async generator, or a plain one (read in a worker thread: app/kinds/threads.py).
Produce = Callable[[str], AsyncIterator["str | Usage"]] | Callable[[str], Iterator["str | Usage"]]
# A model call that is not streamed: its JSON answer and its usage; ``async def`` or plain.
ModelCall = Callable[[], Awaitable[tuple[Any, Usage]]] | Callable[[], tuple[Any, Usage]]


async def answer_and_usage(key: str, fn: ModelCall) -> tuple[Any, Usage]:
    """``fn()``'s (answer, Usage), ``fn`` async or plain. Any other return is a
    PermanentError: the model was called, and a retry would call it again."""
    got: Any = await threads.call(f"model_call {key!r}", fn)
    if not (isinstance(got, tuple | list) and len(got) == 2 and isinstance(got[1], Usage)):
        raise errors.PermanentError(
            f"model_call {key!r}: fn must return (answer, Usage), not {type(got).__name__}"
        )
    return got[0], got[1]


def contiguous(chunks: list[tuple[int, str]]) -> list[str]:
    """The texts of the chunks seq 0, 1, ... up to the first gap (the recorded prefix)."""
    by_seq = dict(chunks)
    out: list[str] = []
    while len(out) in by_seq:
        out.append(by_seq[len(out)])
    return out


class ChunkStream:
    """A model step's text on the job's stream: chunks under the step's key, seq 0, 1, ...

    ``open`` reads the chunks earlier attempts recorded (``partial``; the next chunk's seq
    follows theirs). ``add(piece)`` streams a piece that continues the text (what
    ``ctx.generate``'s ``produce`` yields); ``said(piece)`` takes a piece of an answer the
    model gives from its start again (an agent framework's request, sent again after a
    crash) and streams only what lies past the text the stream holds: a deterministic
    model's answer reads as one text, no chunk twice, none lost. If the model says
    something else this time (``diverged``, logged), the reader sees the recorded prefix,
    then this answer's text past that length; the step's record (this answer) is the
    truth."""

    def __init__(self, ctx: JobContext[Any], key: str, recorded: list[str]) -> None:
        self._ctx = ctx
        self.key = key
        self.partial = "".join(recorded)
        self.seq = len(recorded)
        self._pieces = [self.partial]
        self._length = len(self.partial)  # of the text the stream holds
        self._said = 0  # characters of this attempt's answer (``said``) so far
        self.diverged = False  # whether that answer differs from the recorded prefix

    @classmethod
    async def open(cls, ctx: JobContext[Any], key: str) -> ChunkStream:
        return cls(ctx, key, contiguous(await ctx._recorded_chunks(key)))

    @property
    def text(self) -> str:
        """The text the stream holds: the recorded chunks and this attempt's."""
        return "".join(self._pieces)

    async def add(self, piece: str) -> None:
        for part in storable_parts(piece):
            chunk = Emitted(self._ctx.now(), "chunk", {"text": part}, key=self.key, seq=self.seq)
            await self._ctx._output(chunk)
            self._pieces.append(part)
            self._length += len(part)
            self.seq += 1

    async def said(self, piece: str) -> None:
        clean = "".join(storable_parts(piece))
        start, self._said = self._said, self._said + len(clean)
        if start < len(self.partial) and not self.diverged:
            again = self.partial[start : self._said]
            if not clean.startswith(again):
                self.diverged = True
                self._ctx.log.warning(
                    "the model's answer differs from the text streamed before the crash",
                    extra={"effect": self.key, "at": start},
                )
        if self._said > self._length:
            await self.add(clean[max(0, self._length - start) :])


async def generate(
    ctx: JobContext[Any], key: str, produce: Produce, *, budget: str | None = None, tokens: int = 0
) -> str:
    """``ctx.generate``: see the module's docstring. Returns the whole text."""

    async def call() -> tuple[dict[str, Any], Usage]:
        stream = await ChunkStream.open(ctx, key)
        usage: Usage | None = None
        async for piece in threads.iterate(
            f"generate {key!r}", functools.partial(produce, stream.partial)
        ):
            if isinstance(piece, Usage):
                usage = piece
                continue
            if not isinstance(piece, str):
                raise errors.PermanentError(f"generate {key!r}: produced {type(piece).__name__}")
            await stream.add(piece)
        if usage is None:
            raise errors.PermanentError(f"generate {key!r}: the model reported no usage")
        value = {"text": stream.text, "chunks": stream.seq, "continued_from": len(stream.partial)}
        return {**value, **usage.to_json()}, usage

    recorded: dict[str, Any] = await ctx.model_call(key, call, budget=budget, tokens=tokens)
    return str(recorded["text"])


# A chunk's most characters: a piece of a stream is short; a longer one is cut.
MAX_PIECE_CHARS = 8_000


def storable_parts(piece: str) -> list[str]:
    """A model's piece as chunks PostgreSQL can store: a NUL or a lone surrogate (which a
    server may send as \\u0000 or \\ud800) becomes U+FFFD, and a long piece is cut. The
    text recorded and continued from is this one."""
    clean = piece.replace("\x00", "\ufffd")
    try:
        clean.encode("utf-8")
    except UnicodeEncodeError:
        clean = clean.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return [clean[i : i + MAX_PIECE_CHARS] for i in range(0, len(clean), MAX_PIECE_CHARS)]
