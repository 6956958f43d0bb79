"""N processes of one multi-host job on this machine, on fake CPU devices.

  python -m launch.local --num_processes=2 --devices_per_process=4 -- \
      pretrain --config=configs/pretrain.py:runlocal --workdir=runs/two_hosts

Each process is `python -m albert_jax.cli ARGS --multihost` with the environment of a host:
JAX_PLATFORMS=cpu, XLA_FLAGS=--xla_force_host_platform_device_count=D, and the coordinator
settings `albert_jax.distributed` reads (127.0.0.1 and a free port, the process count, its id).
The processes run collectives over gloo, so the job computes what it computes on a pod: this is
how the tests check multi-host training, and how to debug a pod config on a laptop.
Output lines are prefixed with the process id; if one process fails the others are killed and
the launcher exits with its status.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Mapping, Sequence

from albert_jax import distributed
from launch import command_line, processes

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def xla_flags(existing: str, devices_per_process: int) -> str:
    """`existing` XLA_FLAGS with the fake CPU device count set to `devices_per_process`."""
    kept = [flag for flag in existing.split() if not flag.startswith(_DEVICE_COUNT_FLAG)]
    return " ".join(kept + [f"{_DEVICE_COUNT_FLAG}={devices_per_process}"])


def process_env(process_id: int, *, num_processes: int, devices_per_process: int, port: int,
                base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables that make process `process_id` one host of the local job."""
    return {
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(base_env.get("XLA_FLAGS", ""), devices_per_process),
        distributed.ENV_COORDINATOR_ADDRESS: f"127.0.0.1:{port}",
        distributed.ENV_NUM_PROCESSES: str(num_processes),
        distributed.ENV_PROCESS_ID: str(process_id),
        "PYTHONUNBUFFERED": "1",  # lines as they are printed, not when a buffer fills
    }


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    launcher_args, albert_jax_args = command_line.split_argv(argv)
    parser = argparse.ArgumentParser(
        prog="python -m launch.local", description=__doc__.split("\n\n")[0],
        usage="%(prog)s [--num_processes=N] [--devices_per_process=D] [--dry_run] "
              "-- COMMAND [FLAGS...]")
    parser.add_argument("--num_processes", type=int, default=2, help="processes (hosts) to start")
    parser.add_argument("--devices_per_process", type=int, default=1,
                        help="fake CPU devices per process")
    parser.add_argument("--coordinator_port", type=int, default=0,
                        help="coordinator port on 127.0.0.1 (0: pick a free one)")
    parser.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(launcher_args)
    if not albert_jax_args:
        parser.error("give the albert-jax command after `--`, e.g. -- pretrain --config=... "
                     "--workdir=...")
    if args.num_processes < 1 or args.devices_per_process < 1:
        parser.error(f"--num_processes={args.num_processes} and --devices_per_process="
                     f"{args.devices_per_process} must be at least 1")
    return args, albert_jax_args


def main(argv: Sequence[str] | None = None) -> int:
    args, albert_jax_args = parse_args(sys.argv[1:] if argv is None else argv)
    port = args.coordinator_port or free_port()
    command = [sys.executable, "-m", "albert_jax.cli",
               *command_line.with_multihost(albert_jax_args)]
    envs = [process_env(process_id, num_processes=args.num_processes,
                        devices_per_process=args.devices_per_process, port=port,
                        base_env=os.environ)
            for process_id in range(args.num_processes)]
    for process_id, env in enumerate(envs):
        command_line.show(command, env, prefix=f"[{process_id}] $ ")
    if args.dry_run:
        return 0
    return processes.run_all([command] * args.num_processes,
                          [{**os.environ, **env} for env in envs])


if __name__ == "__main__":
    sys.exit(main())
