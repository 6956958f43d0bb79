"""The errors that albert_jax raises on purpose: the leaf of the import graph.

The CLI prints each of them as one line (`albert-jax <command>: error: ...`), not a traceback,
so every message names the file, key or value at fault and says what to do.
"""


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the value."""


class SweepStopped(RuntimeError):
    """Workers of `albert-jax sweep` stopped with an error; rerunning the command continues."""
