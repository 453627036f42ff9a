"""``python -m app.tools.fakemodel --port 8089``: serve the fake model until stopped."""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn

from app.tools.fakemodel.server import create_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m app.tools.fakemodel",
        description="A deterministic OpenAI-compatible chat completions server for tests.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--log", type=Path, default=None, help="a JSON line per request")
    parser.add_argument(
        "--chunk-ms", type=float, default=0, help="a pause before each chunk of a streamed answer"
    )
    args = parser.parse_args(argv)
    app = create_app(args.log, chunk_ms=args.chunk_ms)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
