"""Command lines the launchers build: splitting at `--`, `--multihost`, quoting, printing.

Everything before `--` configures the launcher; everything after it is the albert-jax command
line, passed on unchanged with `--multihost` added. A remote command is one shell line in which
every albert-jax argument is quoted, so that values with spaces, quotes, `;`, `$(...)` or
backticks arrive as written.
"""
from __future__ import annotations

import shlex
from typing import Mapping, Sequence

# What a fresh host runs before albert-jax: the checkout and virtualenv that `launch.tpu setup`
# creates (and the README asks for on GPU hosts).
DEFAULT_WORKDIR_SETUP = "cd ~/albert_jax && source .venv/bin/activate"


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(launcher arguments, albert-jax arguments): the two sides of the first `--`."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    split = argv.index("--")
    return argv[:split], argv[split + 1:]


def with_multihost(albert_jax_args: Sequence[str]) -> list[str]:
    """The albert-jax arguments plus `--multihost`, unless they already set it (e.g. =mpi4py)."""
    args = list(albert_jax_args)
    if any(arg == "--multihost" or arg.startswith("--multihost=") for arg in args):
        return args
    return args + ["--multihost"]


def remote_command(workdir_setup: str, albert_jax_args: Sequence[str]) -> str:
    """One shell command line: `workdir_setup` (shell code, as written) && albert-jax ARGS.

    Each argument is quoted for the remote shell, so values with spaces, `=`, `*` or quotes
    arrive as written (`--config.data.corpus=/data/my corpus/*.txt` stays one argument).
    """
    command = shlex.join(["albert-jax", *albert_jax_args])
    return f"{workdir_setup} && {command}" if workdir_setup else command


def show(argv: Sequence[str], env: Mapping[str, str] | None = None, prefix: str = "") -> None:
    """Prints a command as a shell line a user can copy (environment assignments first)."""
    assignments = [f"{key}={shlex.quote(value)}" for key, value in (env or {}).items()]
    print(prefix + " ".join(assignments + [shlex.join(argv)]), flush=True)
