"""``python -m app.cli``: the same as the ``tasklease`` command."""

from app.cli import main

main()
