"""One albert-jax command on every host of a GPU cluster: through SLURM, or over ssh.

  python -m launch.gpu slurm --nodes=4 --gpus_per_node=8 [--cpus_per_task=12] [--partition=P] \
      [--account=A] [--time=24:00:00] [--script=job.sbatch] [--dry_run] \
      -- pretrain --config=... --workdir=/shared/run1
  python -m launch.gpu hosts --hosts=gpu1,gpu2 [--coordinator_port=8476] [--dry_run] \
      -- pretrain --config=... --workdir=/shared/run1

slurm: writes an sbatch script (printed; saved to --script if given) and submits it with
`sbatch`. It runs one process per GPU, `srun albert-jax ARGS --multihost`: jax's SLURM detection
gives each process its rank and binds it to GPU $SLURM_LOCALID (one process per node would see
only GPU 0 that way). So config.batch_size must divide by nodes x gpus_per_node.

hosts: one `ssh HOST 'SETUP && albert-jax ARGS --multihost --coordinator_address=FIRST:PORT
--num_processes=N --process_id=I'` per host, run side by side with output prefixed by process
id; one process per host sees all its GPUs. The first host runs the coordinator on PORT.
ssh gets a terminal (-tt) so that a killed launcher hangs up the remote processes too.
In both modes the workdir must be on storage every host sees.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from typing import Sequence

from launch import command_line, processes

DEFAULT_COORDINATOR_PORT = 8476


def sbatch_script(albert_jax_args: Sequence[str], *, nodes: int, gpus_per_node: int,
                  job_name: str = "albert-jax", partition: str | None = None,
                  account: str | None = None, time: str | None = None,
                  cpus_per_task: int | None = None,
                  workdir_setup: str = command_line.DEFAULT_WORKDIR_SETUP) -> str:
    """The sbatch script that runs `albert-jax ARGS --multihost` once per GPU of `nodes` nodes."""
    options = [f"--job-name={job_name}", f"--nodes={nodes}",
               f"--ntasks-per-node={gpus_per_node}", f"--gpus-per-node={gpus_per_node}"]
    options += [f"--{name}={value}" for name, value in
                (("cpus-per-task", cpus_per_task), ("partition", partition), ("account", account),
                 ("time", time)) if value]
    options.append("--output=%x-%j.out")
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in options),
             "# One process per GPU: jax reads its rank and GPU from SLURM's variables.",
             "set -e"]
    if workdir_setup:
        lines.append(workdir_setup)
    lines.append(shlex.join(["srun", "--kill-on-bad-exit=1", "albert-jax",
                             *command_line.with_multihost(albert_jax_args)]))
    return "\n".join(lines) + "\n"


def coordinator_host(host: str) -> str:
    """The host name in an ssh destination (`user@host` -> `host`)."""
    return host.rpartition("@")[2]


def ssh_commands(albert_jax_args: Sequence[str], *, hosts: Sequence[str], coordinator_port: int,
                 workdir_setup: str = command_line.DEFAULT_WORKDIR_SETUP) -> list[list[str]]:
    """One ssh argv per host; host i runs process i, the first host the coordinator."""
    coordinator = f"{coordinator_host(hosts[0])}:{coordinator_port}"
    commands = []
    for process_id, host in enumerate(hosts):
        args = command_line.with_multihost(albert_jax_args) + [
            f"--coordinator_address={coordinator}", f"--num_processes={len(hosts)}",
            f"--process_id={process_id}"]
        commands.append(["ssh", "-tt", host, command_line.remote_command(workdir_setup, args)])
    return commands


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    launcher_args, albert_jax_args = command_line.split_argv(argv)
    parser = argparse.ArgumentParser(prog="python -m launch.gpu",
                                     description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True, metavar="{slurm,hosts}")
    slurm = modes.add_parser("slurm", help="submit an sbatch job",
                             usage="%(prog)s --nodes=N --gpus_per_node=G [options] -- COMMAND ...")
    slurm.add_argument("--nodes", type=int, required=True, help="nodes (hosts) to allocate")
    slurm.add_argument("--gpus_per_node", type=int, required=True,
                       help="GPUs per node: one process each")
    slurm.add_argument("--cpus_per_task", type=int,
                       help="CPU cores per process (default: the cluster's, often 1, which "
                            "starves the input pipeline)")
    slurm.add_argument("--job_name", default="albert-jax", help="SLURM job name")
    slurm.add_argument("--partition", help="SLURM partition (default: the cluster's)")
    slurm.add_argument("--account", help="SLURM account to charge")
    slurm.add_argument("--time", help="time limit, e.g. 24:00:00")
    slurm.add_argument("--script", help="also save the sbatch script to this file")
    hosts = modes.add_parser("hosts", help="ssh to every host of a list",
                             usage="%(prog)s --hosts=H1,H2,... [options] -- COMMAND ...")
    hosts.add_argument("--hosts", required=True, help="comma-separated; the first coordinates")
    hosts.add_argument("--coordinator_port", type=int, default=DEFAULT_COORDINATOR_PORT,
                       help="a free port on the first host")
    for mode in (slurm, hosts):
        mode.add_argument("--workdir_setup", default=command_line.DEFAULT_WORKDIR_SETUP,
                          help="shell code run before albert-jax on every host ('' for none)")
        mode.add_argument("--dry_run", action="store_true", help="print, run nothing")
    args = parser.parse_args(launcher_args)
    mode = slurm if args.mode == "slurm" else hosts
    if not albert_jax_args:
        mode.error("give the albert-jax command after `--`, e.g. -- pretrain --config=... "
                   "--workdir=...")
    if args.mode == "slurm":
        if args.nodes < 1 or args.gpus_per_node < 1:
            mode.error(f"--nodes={args.nodes} and --gpus_per_node={args.gpus_per_node} must be "
                       "at least 1")
        if args.cpus_per_task is not None and args.cpus_per_task < 1:
            mode.error(f"--cpus_per_task={args.cpus_per_task} must be at least 1")
        for name in ("job_name", "partition", "account", "time"):
            value = getattr(args, name)
            # An #SBATCH line ends at a space, and a newline would start a script line.
            if value is not None and (not value or any(char.isspace() for char in value)):
                mode.error(f"--{name}={value!r}: give a non-empty value without spaces")
    if args.mode == "hosts":
        args.hosts = args.hosts.split(",")
        if not all(args.hosts) or len(set(args.hosts)) != len(args.hosts):
            mode.error(f"--hosts={','.join(args.hosts)}: give distinct, non-empty host names")
        if not 0 < args.coordinator_port < 65536:
            mode.error(f"--coordinator_port={args.coordinator_port} is not a port (1-65535)")
    return args, albert_jax_args


def main(argv: Sequence[str] | None = None) -> int:
    args, albert_jax_args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.mode == "hosts":
        commands = ssh_commands(albert_jax_args, hosts=args.hosts,
                                coordinator_port=args.coordinator_port,
                                workdir_setup=args.workdir_setup)
        for process_id, command in enumerate(commands):
            command_line.show(command, prefix=f"[{process_id}] $ ")
        return 0 if args.dry_run else processes.run_all(commands)

    script = sbatch_script(albert_jax_args, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                           job_name=args.job_name, partition=args.partition,
                           account=args.account, time=args.time,
                           cpus_per_task=args.cpus_per_task,
                           workdir_setup=args.workdir_setup)
    print(script, end="", flush=True)
    if args.script:
        with open(args.script, "w") as file:
            file.write(script)
        print(f"# written to {args.script}", flush=True)
    if args.dry_run:
        return 0
    try:  # sbatch reads the script from stdin
        return processes.exit_status(subprocess.run(["sbatch"], input=script, text=True).returncode)
    except FileNotFoundError:
        sys.exit("launch.gpu: sbatch not found: run on a SLURM login node, or use --dry_run "
                 "(and --script=FILE) to get the script")


if __name__ == "__main__":
    sys.exit(main())
