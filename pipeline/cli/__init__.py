"""The ``babelstream`` command line: the root command, its sub-commands, and what they share."""
