"""A Cloud TPU VM's whole lifecycle for one albert-jax job: create, setup, run, logs, delete, up.

  python -m launch.tpu create --tpu=my-v4-32 --zone=us-central2-b --accelerator_type=v4-32 \
      [--runtime_version=V] [--spot | --preemptible] [--queued] [--project=P]
  python -m launch.tpu setup  --tpu=my-v4-32 --zone=us-central2-b [--repo=GIT_URL [--branch=B]] \
      [--gcsfuse=BUCKET:/mnt/PATH]
  python -m launch.tpu run    --tpu=my-v4-32 --zone=us-central2-b \
      -- pretrain --config=configs/pretrain.py:size=base --workdir=gs://bucket/run1
  python -m launch.tpu logs   --tpu=my-v4-32 --zone=us-central2-b
  python -m launch.tpu delete --tpu=my-v4-32 --zone=us-central2-b [--queued]
  python -m launch.tpu up     --tpu=my-v4-32 --zone=us-central2-b --accelerator_type=v4-32 \
      --spot --repo=GIT_URL [--max_retries=3] [--poll_seconds=30] [--settle_seconds=60] \
      [--keep] -- pretrain ... --workdir=gs://bucket/run1

Every verb takes --dry_run: print the gcloud commands, one per line, and run nothing. Without a
verb, the arguments are those of `run` (`python -m launch.tpu --tpu=... --zone=... -- pretrain`).

create: a TPU VM, or with --queued a queued resource of the same name that creates it when
  there is capacity. --runtime_version defaults to the JAX runtime of the accelerator's
  generation.
setup: on every worker, clones --repo into ~/albert_jax and checks out --branch (a later setup
  updates it; without --repo, the checkout there is used), then installs it with the [tf,tpu,sweep]
  extras into ~/albert_jax/.venv, made by uv with Python 3.12 (the TPU images' Python 3.10 is
  too old for jax). Workers get the code from git, so push what they should run first.
  --gcsfuse=BUCKET:/mnt/PATH also installs Cloud Storage FUSE and mounts the bucket there on
  every worker, so that e.g. --config.data.dir=/mnt/PATH/data reads the training shards through
  the mount (albert_jax/data/input/shard_copy.py: mode (a); with data.dir=gs://... each host copies
  its shards to its disk instead, mode (b)).
run: on every worker at once, `--workdir_setup` (enter ~/albert_jax, activate .venv) and then
  `albert-jax ARGS --multihost`; jax reads the pod's coordinator, process count and each
  worker's id from the TPU metadata. Each worker appends its output to --log_file on its own
  disk; worker 0's is process 0's. The workdir must be on storage every worker sees (gs://).
logs: follows process 0's log (tail -F on worker 0) until Ctrl-C.
delete: deletes the TPU VM (with --queued: the queued resource and its TPU VM).
up: create, wait until the TPU is ready, setup, run. If the TPU does not stay ready for
  --settle_seconds after the setup or the run ends (preempted, terminated, suspended; a
  preempted run may even exit 0, as the trainer checkpoints and stops on SIGTERM), it deletes
  the TPU and starts again, at most --max_retries times; the rerun resumes from the last
  checkpoint in its gs:// workdir. A failure while the TPU stays ready is the command's own: up
  stops there.
  At the end (also after a failure, Ctrl-C or SIGTERM) it deletes what it created, unless --keep.

--num_slices=N (every verb; N > 1 implies --queued): N slices of --accelerator_type as one job
  over the data-center network (multislice; docs/launching.md "More than one slice"). create
  makes one queued resource with `--node-count=N --node-prefix=TPU`, whose slices are the TPU
  VMs TPU-0 ... TPU-<N-1>; setup installs on every worker of every slice; run asks for slice 0's
  worker 0 address and runs the same albert-jax command on every worker of every slice at once,
  each with MEGASCALE_COORDINATOR_ADDRESS (that address), MEGASCALE_PORT, MEGASCALE_NUM_SLICES
  and its MEGASCALE_SLICE_ID; their output is shown prefixed [slice], and when one slice's
  command fails (a lost slice) the others are stopped, so the job ends instead of waiting in a
  collective. up then sees the lost slice (the queued resource or a slice not ready), deletes
  the queued resource and starts again; the rerun resumes from the last checkpoint, whatever
  the slice count (docs/launching.md). logs follows slice 0's worker 0.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from typing import Callable, NoReturn, Sequence

from launch import command_line, processes, tpu_commands
from launch.tpu_commands import Tpu

VERBS = ("create", "setup", "run", "logs", "delete", "up")
DEFAULT_POLL_SECONDS = 30.0
DEFAULT_MAX_RETRIES = 3
# A preempted TPU VM is shut down about 30 s after its processes get SIGTERM.
DEFAULT_SETTLE_SECONDS = 60.0


class Gcloud:
    """Runs gcloud commands, printing each first; with dry_run, only prints them."""

    def __init__(self, dry_run: bool):
        self.dry_run = dry_run

    def run(self, argv: Sequence[str]) -> int:
        """Prints `argv` and runs it in the foreground; its exit status (0 in a dry run)."""
        command_line.show(argv, prefix="$ ")
        if self.dry_run:
            return 0
        try:
            return processes.exit_status(subprocess.run(list(argv)).returncode)
        except FileNotFoundError:
            _gcloud_missing()

    def run_all(self, argvs: Sequence[Sequence[str]]) -> int:
        """Runs one argv like `run`, several side by side (output prefixed [i]; when one fails
        the others are stopped); 0 or the first failure's status (0 in a dry run)."""
        if len(argvs) == 1:
            return self.run(argvs[0])
        for argv in argvs:
            command_line.show(argv, prefix="$ ")
        if self.dry_run:
            return 0
        try:
            return processes.run_all(argvs)
        except FileNotFoundError:
            _gcloud_missing()

    def state(self, argv: Sequence[str]) -> str | None:
        """What the describe command `argv` prints, unprinted itself (it is polled); None if it
        fails (the resource is gone, or gcloud cannot reach it)."""
        try:
            result = subprocess.run(list(argv), capture_output=True, text=True)
        except FileNotFoundError:
            _gcloud_missing()
        return result.stdout.strip() if result.returncode == 0 else None


def _gcloud_missing() -> NoReturn:
    sys.exit("launch.tpu: gcloud not found: install the Google Cloud CLI "
             "(https://cloud.google.com/sdk/docs/install), or use --dry_run to print the commands")


def wait_until_ready(gcloud: Gcloud, tpu: Tpu, poll_seconds: float) -> bool:
    """Polls the TPU (its queued resource, if queued) until it is ready: True; False if it is
    lost on the way (preempted, failed) or can no longer be described."""
    if tpu.queued:
        argv, ready, lost = (tpu_commands.describe_queued_resource_state(tpu),
                             tpu_commands.QUEUED_RESOURCE_READY, tpu_commands.QUEUED_RESOURCE_LOST)
    else:
        argv, ready, lost = (tpu_commands.describe_node_state(tpu), tpu_commands.NODE_READY,
                             tpu_commands.NODE_LOST)
    print(f"# Wait until the state is {ready}, asking every {poll_seconds:g} s:", flush=True)
    command_line.show(argv, prefix="$ ")
    if gcloud.dry_run:
        return True
    previous = ""
    while True:
        state = gcloud.state(argv)
        if state != previous:
            print(f"# state: {state or 'unknown (describe failed)'}", flush=True)
            previous = state
        if state == ready:
            return True
        if state is None or state in lost:
            return False
        time.sleep(poll_seconds)


def stays_ready(gcloud: Gcloud, tpu: Tpu, settle_seconds: float, poll_seconds: float) -> bool:
    """Whether the TPU VM (and its queued resource, if queued) is ready now and still is
    `settle_seconds` later: a preemption's SIGTERM can end the run before the state shows it."""
    checks = [(tpu_commands.describe_node_state(tpu, node), tpu_commands.NODE_READY)
              for node in tpu_commands.node_names(tpu)]
    if tpu.queued:
        checks.insert(0, (tpu_commands.describe_queued_resource_state(tpu),
                          tpu_commands.QUEUED_RESOURCE_READY))
    states = " and ".join(dict.fromkeys(ready for _, ready in checks))  # each once, in order
    print(f"# Retry unless the state stays {states} for "
          f"{settle_seconds:g} s (a preemption can end the run before the state shows it):",
          flush=True)
    for argv, _ in checks:
        command_line.show(argv, prefix="$ ")
    if gcloud.dry_run:
        return True
    deadline = time.monotonic() + settle_seconds
    while True:
        for argv, ready in checks:
            state = gcloud.state(argv)
            if state != ready:
                print(f"# state: {state or 'unknown (describe failed)'}", flush=True)
                return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(poll_seconds)


def _exit_on_sigterm(signum: int, frame: object) -> NoReturn:
    sys.exit(128 + signum)  # SystemExit unwinds through `up`'s finally, which deletes the TPU


def run_commands(gcloud: Gcloud, tpu: Tpu, run_line: Callable[[str | None, int], str]
                 ) -> list[list[str]] | None:
    """The ssh argvs, one per slice, that run `run_line(coordinator address, slice id)` on
    every worker. Several slices need slice 0's worker 0 address, asked first (None if it
    cannot be read); one slice runs `run_line(None, 0)`."""
    if tpu.num_slices == 1:
        return [tpu_commands.ssh(tpu, worker="all", command=run_line(None, 0))]
    describe = tpu_commands.describe_coordinator_address(tpu)
    print("# Slice 0's worker 0 coordinates the slices; its address:", flush=True)
    command_line.show(describe, prefix="$ ")
    address = ("ADDRESS_OF_SLICE_0_WORKER_0" if gcloud.dry_run else gcloud.state(describe))
    if not address:
        print(f"launch.tpu: could not read the address of {tpu_commands.node_names(tpu)[0]}'s "
              "worker 0 (the command above)", file=sys.stderr, flush=True)
        return None
    return [tpu_commands.ssh(tpu, worker="all", node=node, command=run_line(address, index))
            for index, node in enumerate(tpu_commands.node_names(tpu))]


def up(gcloud: Gcloud, tpu: Tpu, *, create: Sequence[str], setup: Sequence[Sequence[str]],
       run: Callable[[], list[list[str]] | None], max_retries: int, poll_seconds: float,
       settle_seconds: float, keep: bool) -> int:
    """Creates the TPU, waits until it is ready, runs `setup` and then `run()` (ssh argvs, one
    per slice, side by side) on it; recreates it when it is lost to a preemption, at most
    `max_retries` times; deletes it at the end unless `keep`. Returns 0, or the status of the
    step that failed (1 if the TPU was lost while waiting for it)."""
    ending = "keep the TPU (--keep)" if keep else "delete (also after a failure or Ctrl-C)"
    print(f"# up: create, wait until ready, setup, run, then {ending}.\n"
          "# If the TPU does not stay ready after the setup or the run ends (preempted), delete "
          "it and\n"
          f"# start again from the create, at most {max_retries} times: the run resumes from its "
          "last checkpoint.", flush=True)
    delete = tpu_commands.delete(tpu)
    created = False
    previous_handler = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # Ctrl-C (SIGINT) raises KeyboardInterrupt, whose unwinding deletes the TPU, even when `up`
    # was started with SIGINT ignored, as a non-interactive shell does for a command run with `&`.
    previous_interrupt_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for attempt in range(max_retries + 1):
            if attempt:
                print(f"# The TPU was lost: recreating it (retry {attempt} of {max_retries}).",
                      flush=True)
                if gcloud.run(delete) == 0:  # if not, the create below fails and says why
                    created = False
            status = gcloud.run(create)
            if status:
                print(f"launch.tpu up: creating {tpu.name} failed (status {status})",
                      file=sys.stderr, flush=True)
                return status
            created = True
            status = 1
            if wait_until_ready(gcloud, tpu, poll_seconds):
                status = gcloud.run_all(setup)
                if status == 0:
                    commands = run()
                    status = gcloud.run_all(commands) if commands else 1
                # Success is checked too: the trainer answers a preemption's SIGTERM with a
                # checkpoint and exit status 0.
                if stays_ready(gcloud, tpu, settle_seconds, poll_seconds):
                    if status:
                        print(f"launch.tpu up: failed with status {status} while {tpu.name} is "
                              "ready: not a preemption, so not retried", file=sys.stderr,
                              flush=True)
                    return status
        print(f"launch.tpu up: {tpu.name} was lost {max_retries + 1} times; giving up (raise "
              "--max_retries to try more often)", file=sys.stderr, flush=True)
        return status or 1  # a run stopped by the last preemption exits 0, unfinished
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        signal.signal(signal.SIGINT, previous_interrupt_handler)
        if created and keep:
            print("# Kept (--keep); delete it with:", flush=True)
            command_line.show(delete, prefix="$ ")
        elif created:
            print("# Delete what up created:", flush=True)
            if gcloud.run(delete):
                print(f"launch.tpu up: deleting {tpu.name} failed: delete it yourself (the "
                      "command above) before it costs more", file=sys.stderr, flush=True)


def _albert_jax_workdir(albert_jax_args: Sequence[str]) -> str | None:
    """The value of `--workdir` in the albert-jax arguments (`--workdir=W` or `--workdir W`)."""
    for index, arg in enumerate(albert_jax_args):
        if arg.startswith("--workdir="):
            return arg.split("=", 1)[1]
        if arg == "--workdir" and index + 1 < len(albert_jax_args):
            return albert_jax_args[index + 1]
    return None


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The launcher's parser and each verb's, built from shared groups of flags."""
    location = argparse.ArgumentParser(add_help=False)
    location.add_argument("--tpu", required=True, help="TPU VM name")
    location.add_argument("--zone", required=True, help="its zone, e.g. us-central2-b")
    location.add_argument("--project", help="GCP project (default: gcloud's)")
    location.add_argument("--dry_run", action="store_true",
                          help="print the commands, one per line; run nothing")
    location.add_argument("--num_slices", type=int, default=1,
                          help="slices of one multislice job (N > 1: one queued resource of N "
                               "TPU VMs, TPU-0 ... TPU-<N-1>; implies --queued)")
    queued = argparse.ArgumentParser(add_help=False)
    queued.add_argument("--queued", action="store_true",
                        help="through a queued resource named like the TPU: it waits in a "
                             "queue until there is capacity")
    creation = argparse.ArgumentParser(add_help=False)
    creation.add_argument("--accelerator_type", required=True, help="e.g. v4-32, v5litepod-16")
    creation.add_argument("--runtime_version",
                          help="TPU software version (default: the JAX one of the generation: "
                               + ", ".join(f"{generation} {version}" for generation, version
                                           in tpu_commands.RUNTIME_VERSIONS.items()) + ")")
    provisioning = creation.add_mutually_exclusive_group()
    provisioning.add_argument("--spot", action="store_const", const="spot", dest="provisioning",
                              help="Spot VMs: cheaper, may be preempted at any time")
    provisioning.add_argument("--preemptible", action="store_const", const="preemptible",
                              dest="provisioning", help="preemptible TPU VM (not with --queued)")
    installing = argparse.ArgumentParser(add_help=False)
    installing.add_argument("--repo", help="git URL to clone into ~/albert_jax (default: install "
                                           "the checkout already there)")
    installing.add_argument("--branch", help=f"--repo's branch to check out (default: "
                                             f"{tpu_commands.DEFAULT_BRANCH})")
    installing.add_argument("--gcsfuse", metavar="BUCKET:/mnt/PATH",
                            help="also mount the bucket at /mnt/PATH on every worker (gcsfuse), "
                                 "to read data.dir through it")
    logging = argparse.ArgumentParser(add_help=False)
    logging.add_argument("--log_file", default=tpu_commands.DEFAULT_LOG_FILE,
                         help="where each worker appends the output of the run (on its disk)")
    running = argparse.ArgumentParser(add_help=False)
    running.add_argument("--workdir_setup", default=command_line.DEFAULT_WORKDIR_SETUP,
                         help="shell code run before albert-jax on every worker ('' for none)")
    lifecycle = argparse.ArgumentParser(add_help=False)
    lifecycle.add_argument("--max_retries", type=int, default=DEFAULT_MAX_RETRIES,
                           help="times to recreate the TPU after it is lost to a preemption")
    lifecycle.add_argument("--poll_seconds", type=float, default=DEFAULT_POLL_SECONDS,
                           help="seconds between two looks at the state while waiting")
    lifecycle.add_argument("--settle_seconds", type=float, default=DEFAULT_SETTLE_SECONDS,
                           help="after the run ends, how long the TPU must stay ready for the "
                                "end to count (a preemption's SIGTERM ends the run before the "
                                "state shows it)")
    lifecycle.add_argument("--keep", action="store_true", help="do not delete the TPU at the end")

    parser = argparse.ArgumentParser(prog="python -m launch.tpu",
                                     description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{" + ",".join(VERBS) + "}")
    verb_parents = {
        "create": ([location, queued, creation], "create the TPU VM (or queue it)", ""),
        "setup": ([location, installing], "install albert-jax on every worker", ""),
        "run": ([location, logging, running], "run albert-jax on every worker",
                " -- COMMAND [FLAGS...]"),
        "logs": ([location, logging], "follow process 0's log", ""),
        "delete": ([location, queued], "delete the TPU VM (or its queued resource)", ""),
        "up": ([location, queued, creation, installing, logging, running, lifecycle],
               "create, setup, run (recreating after preemptions), delete",
               " -- COMMAND [FLAGS...]"),
    }
    verb_parsers = {}
    for verb, (parents, help_text, command) in verb_parents.items():
        verb_parsers[verb] = verbs.add_parser(
            verb, parents=parents, help=help_text,
            usage=f"%(prog)s --tpu=NAME --zone=ZONE [options]{command}")
        # Every verb's namespace has every setting, so that main needs no hasattr.
        verb_parsers[verb].set_defaults(queued=False, provisioning=None, repo=None, branch=None,
                                        gcsfuse=None)
    return parser, verb_parsers


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """(launcher settings, albert-jax arguments); argparse's exit 2 with a message if wrong."""
    launcher_args, albert_jax_args = command_line.split_argv(argv)
    if launcher_args and launcher_args[0] not in VERBS and launcher_args[0] not in ("-h",
                                                                                     "--help"):
        launcher_args = ["run", *launcher_args]  # the form from before the verbs
    parser, verb_parsers = _parsers()
    args = parser.parse_args(launcher_args)
    verb = verb_parsers[args.verb]  # its error() prints its usage line

    takes_command = args.verb in ("run", "up")
    if takes_command and not albert_jax_args:
        verb.error("give the albert-jax command after `--`, e.g. -- pretrain --config=... "
                   "--workdir=gs://...")
    if not takes_command and albert_jax_args:
        verb.error(f"{args.verb} runs no albert-jax command: drop what follows `--` (or use "
                   "run / up)")
    if args.branch and not args.repo:
        verb.error(f"--branch={args.branch} needs --repo=GIT_URL to fetch it from")
    if args.gcsfuse is not None:
        bucket, _, mount_point = args.gcsfuse.removeprefix("gs://").partition(":")
        if not bucket or "/" in bucket or not mount_point.startswith("/"):
            verb.error(f"--gcsfuse={args.gcsfuse}: give BUCKET:/MOUNT/PATH, e.g. "
                       "my-bucket:/mnt/my-bucket (a bucket name, an absolute path)")
        args.gcsfuse = (bucket, mount_point)
    if args.num_slices < 1:
        verb.error(f"--num_slices={args.num_slices} must be a positive integer")
    if args.num_slices > 1 and args.verb in ("create", "delete", "up"):
        args.queued = True  # several slices are one queued resource
    if args.queued and args.provisioning == "preemptible":
        verb.error("--preemptible does not apply to a queued resource: use --spot with --queued")
    if args.verb in ("create", "up") and not args.runtime_version:
        args.runtime_version = tpu_commands.default_runtime_version(args.accelerator_type)
        if args.runtime_version is None:
            verb.error(f"--accelerator_type={args.accelerator_type}: no default runtime for this "
                       "generation; give --runtime_version (see "
                       "https://cloud.google.com/tpu/docs/runtimes)")
    if args.verb == "up":
        if not args.repo:
            verb.error("up installs albert-jax on a new TPU VM: give --repo=GIT_URL "
                       "(and --branch if not main)")
        if min(args.max_retries, args.poll_seconds, args.settle_seconds) < 0:
            verb.error(f"--max_retries={args.max_retries}, --poll_seconds={args.poll_seconds:g} "
                       f"and --settle_seconds={args.settle_seconds:g} must not be negative")
        workdir = _albert_jax_workdir(albert_jax_args)
        if workdir is not None and not workdir.startswith("gs://"):
            verb.error(f"--workdir={workdir} is on the TPU VM's disk, which a recreated TPU does "
                       "not have: give a gs:// workdir so that the run resumes there")
    return args, albert_jax_args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:  # how `logs` ends, and how a user stops a run (after up's cleanup)
        return 130


def _main(argv: Sequence[str]) -> int:
    args, albert_jax_args = parse_args(argv)
    tpu = Tpu(name=args.tpu, zone=args.zone, project=args.project,
              queued=args.queued or args.num_slices > 1, num_slices=args.num_slices)
    gcloud = Gcloud(dry_run=args.dry_run)
    if args.verb in ("create", "up"):
        create = tpu_commands.create(tpu, accelerator_type=args.accelerator_type,
                                     runtime_version=args.runtime_version,
                                     provisioning=args.provisioning)
    if args.verb in ("setup", "up"):
        setup_line = tpu_commands.setup_command(args.repo, args.branch
                                                or tpu_commands.DEFAULT_BRANCH, args.gcsfuse)
        setup = [tpu_commands.ssh(tpu, worker="all", command=setup_line, node=node)
                 for node in tpu_commands.node_names(tpu)]
    if args.verb in ("run", "up"):
        def run_line(address: str | None, slice_id: int) -> str:
            env = (None if address is None else
                   tpu_commands.megascale_env(address, tpu.num_slices, slice_id))
            return tpu_commands.run_command(args.workdir_setup,
                                            command_line.with_multihost(albert_jax_args),
                                            args.log_file, env)

        def run() -> list[list[str]] | None:
            return run_commands(gcloud, tpu, run_line)

    if args.verb == "create":
        return gcloud.run(create)
    if args.verb == "setup":
        return gcloud.run_all(setup)
    if args.verb == "run":
        commands = run()
        return gcloud.run_all(commands) if commands else 1
    if args.verb == "logs":
        return gcloud.run(tpu_commands.ssh(tpu, worker="0", node=tpu_commands.node_names(tpu)[0],
                                           command=tpu_commands.tail_command(args.log_file)))
    if args.verb == "delete":
        return gcloud.run(tpu_commands.delete(tpu))
    return up(gcloud, tpu, create=create, setup=setup, run=run, max_retries=args.max_retries,
              poll_seconds=args.poll_seconds, settle_seconds=args.settle_seconds, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
