"""One albert-jax command on every worker of a Cloud TPU VM (a pod slice: one host per worker).

  python -m launch.tpu --tpu=my-v4-32 --zone=us-central2-b [--project=P] [--dry_run] \
      -- pretrain --config=configs/pretrain.py:size=base --workdir=gs://bucket/run1
  python -m launch.tpu --tpu=my-v4-32 --zone=us-central2-b --setup --repo=https://github.com/...

Runs `gcloud compute tpus tpu-vm ssh NAME --zone=ZONE --worker=all --command=CMD`, where CMD is
`--workdir_setup` (default: enter ~/albert_jax and activate its .venv) followed by
`albert-jax ARGS --multihost`. Every worker runs it at once; jax finds the pod's coordinator,
the process count and each worker's id from the TPU VM metadata (albert_jax.distributed prints
what it found). The workdir must be on storage every worker sees (gs://...).

--setup installs instead: clones --repo into ~/albert_jax (if it is not there yet), creates
~/albert_jax/.venv and pip-installs the package with the [tf] extra and jax[tpu] on every worker.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from typing import Sequence

import launch

CHECKOUT = "~/albert_jax"  # unquoted in commands: the remote shell expands ~


def gcloud_ssh(*, tpu: str, zone: str, project: str | None, command: str) -> list[str]:
    """The gcloud argv that runs the shell line `command` on every worker of TPU VM `tpu`."""
    argv = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", tpu, f"--zone={zone}"]
    if project:
        argv.append(f"--project={project}")
    return argv + ["--worker=all", f"--command={command}"]


def setup_command(repo: str | None) -> str:
    """Shell line that installs albert-jax into CHECKOUT/.venv (cloning `repo` there if absent)."""
    steps = []
    if repo:
        steps.append(f"(test -d {CHECKOUT} || git clone {shlex.quote(repo)} {CHECKOUT})")
    steps += [f"cd {CHECKOUT}", "python3 -m venv .venv",
              ".venv/bin/pip install --upgrade pip",
              ".venv/bin/pip install -e '.[tf]' 'jax[tpu]'"]
    return " && ".join(steps)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    launcher_args, albert_jax_args = launch.split_argv(argv)
    parser = argparse.ArgumentParser(
        prog="python -m launch.tpu", description=__doc__.split("\n\n")[0],
        usage="%(prog)s --tpu=NAME --zone=ZONE [--project=P] [--dry_run] -- COMMAND [FLAGS...]\n"
              "       %(prog)s --tpu=NAME --zone=ZONE --setup [--repo=GIT_URL] [--dry_run]")
    parser.add_argument("--tpu", required=True, help="TPU VM name")
    parser.add_argument("--zone", required=True, help="its zone, e.g. us-central2-b")
    parser.add_argument("--project", help="GCP project (default: gcloud's)")
    parser.add_argument("--workdir_setup", default=launch.DEFAULT_WORKDIR_SETUP,
                        help="shell code run before albert-jax on every worker ('' for none)")
    parser.add_argument("--setup", action="store_true",
                        help=f"install albert-jax into {CHECKOUT}/.venv on every worker")
    parser.add_argument("--repo", help="--setup: git URL to clone into ~/albert_jax if absent")
    parser.add_argument("--dry_run", action="store_true", help="print the command, run nothing")
    args = parser.parse_args(launcher_args)
    if args.setup and albert_jax_args:
        parser.error("--setup installs and runs nothing else: drop the command after `--`")
    if args.repo and not args.setup:
        parser.error("--repo is used only with --setup")
    if not args.setup and not albert_jax_args:
        parser.error("give the albert-jax command after `--`, e.g. -- pretrain --config=... "
                     "--workdir=gs://...")
    return args, albert_jax_args


def main(argv: Sequence[str] | None = None) -> int:
    args, albert_jax_args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.setup:
        command = setup_command(args.repo)
    else:
        command = launch.remote_command(args.workdir_setup, launch.with_multihost(albert_jax_args))
    argv = gcloud_ssh(tpu=args.tpu, zone=args.zone, project=args.project, command=command)
    launch.show(argv, prefix="$ ")
    if args.dry_run:
        return 0
    try:
        return launch.exit_status(subprocess.run(argv).returncode)
    except FileNotFoundError:
        sys.exit("launch.tpu: gcloud not found: install the Google Cloud CLI "
                 "(https://cloud.google.com/sdk/docs/install), or use --dry_run to print the "
                 "command")


if __name__ == "__main__":
    sys.exit(main())
