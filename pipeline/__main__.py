"""``python -m pipeline`` is the ``babelstream`` command."""

from pipeline.cli.main import main

main()
