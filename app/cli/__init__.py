"""The ``tasklease`` command (``app.cli:main``, also ``python -m app.cli``): what operators,
tests and ``make run`` drive. main.py registers the commands; each group has its module;
runner.py runs their async part; render.py prints their tables."""

from app.cli.main import main

__all__ = ["main"]
