"""``python -m pipeline`` is the ``babelstream`` command."""

from pipeline.cli import main

main()
