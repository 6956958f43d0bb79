"""The gcloud commands of a Cloud TPU's lifecycle, and the shell lines its workers run.

A TPU VM is made either directly (`gcloud compute tpus tpu-vm create NAME`) or through a queued
resource (`gcloud compute tpus queued-resources create NAME --node-id=NAME`), which waits in a
queue until there is capacity and then creates the TPU VM; the queued resource has the TPU's
name. Either way, its workers (one per host of the slice) are reached with
`gcloud compute tpus tpu-vm ssh NAME --worker=...`. Nothing here runs a command: see launch.tpu.

Several slices (multislice, `num_slices` > 1) are one queued resource NAME with
`--node-count=N --node-prefix=NAME`: its TPU VMs are NAME-0 ... NAME-<N-1>, one per slice, and
their workers join one JAX job over the data-center network through the Megascale variables
(`megascale_env`) that the run sets on every worker: slice 0's worker 0 coordinates.
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import Sequence

from launch import command_line

CHECKOUT = "~/albert_jax"  # unquoted in commands: the remote shell expands ~
DEFAULT_LOG_FILE = "~/albert-jax.log"
DEFAULT_BRANCH = "main"
# jax>=0.10.2 needs Python 3.11+, and the TPU images ship Ubuntu 22.04's Python 3.10: uv (from
# PyPI) brings a managed Python of this version into the virtualenv.
PYTHON_VERSION = "3.12"
# tf: reading TFRecord corpora; tpu: jax[tpu] with libtpu; sweep: Optuna and the PostgreSQL
# driver of a sweep that several TPU VMs share (docs/sweeps.md)
PIP_EXTRAS = "tf,tpu,sweep"

# The TPU software version ("runtime") for JAX, per generation (the accelerator type's prefix),
# as https://cloud.google.com/tpu/docs/runtimes lists them.
RUNTIME_VERSIONS = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}

# The state a TPU VM / a queued resource is in when it can run work, and the states from which
# it will not get there (preempted, or given up on): waiting for it ends there.
NODE_READY = "READY"
NODE_LOST = ("PREEMPTED", "TERMINATED")
QUEUED_RESOURCE_READY = "ACTIVE"
QUEUED_RESOURCE_LOST = ("FAILED", "SUSPENDING", "SUSPENDED")
# The port of the Megascale coordinator on slice 0's worker 0 (any port the workers leave free;
# Ray's TPU support takes 8081).
MEGASCALE_PORT = 8080


@dataclasses.dataclass(frozen=True)
class Tpu:
    """A TPU VM: its name and where it is; `queued`: it is made by the queued resource `name`;
    `num_slices` > 1: that many TPU VMs (slices) of one queued resource (always queued)."""
    name: str
    zone: str
    project: str | None = None
    queued: bool = False
    num_slices: int = 1


def node_names(tpu: Tpu) -> list[str]:
    """The TPU VMs: `name`, or name-0 ... name-<N-1> for N slices (gcloud's --node-prefix)."""
    if tpu.num_slices == 1:
        return [tpu.name]
    return [f"{tpu.name}-{index}" for index in range(tpu.num_slices)]


def _location(tpu: Tpu) -> list[str]:
    return [f"--zone={tpu.zone}"] + ([f"--project={tpu.project}"] if tpu.project else [])


def _node(tpu: Tpu, verb: str, node: str | None = None) -> list[str]:
    return ["gcloud", "compute", "tpus", "tpu-vm", verb, node or tpu.name, *_location(tpu)]


def _queued_resource(tpu: Tpu, verb: str) -> list[str]:
    return ["gcloud", "compute", "tpus", "queued-resources", verb, tpu.name, *_location(tpu)]


def default_runtime_version(accelerator_type: str) -> str | None:
    """The JAX runtime for an accelerator type such as v4-32 or v5litepod-16 (None: unknown)."""
    return RUNTIME_VERSIONS.get(accelerator_type.split("-")[0])


def create(tpu: Tpu, *, accelerator_type: str, runtime_version: str,
           provisioning: str | None = None) -> list[str]:
    """The gcloud argv that creates the TPU (or queues its creation).

    provisioning: None (on-demand), "spot" or "preemptible" (TPU VMs only; a queued resource
    takes "spot").
    """
    if tpu.queued:
        nodes = ([f"--node-id={tpu.name}"] if tpu.num_slices == 1 else
                 [f"--node-count={tpu.num_slices}", f"--node-prefix={tpu.name}"])
        argv = _queued_resource(tpu, "create") + nodes + [
            f"--accelerator-type={accelerator_type}", f"--runtime-version={runtime_version}"]
    else:
        argv = _node(tpu, "create") + [f"--accelerator-type={accelerator_type}",
                                       f"--version={runtime_version}"]
    return argv + ([f"--{provisioning}"] if provisioning else [])


def delete(tpu: Tpu) -> list[str]:
    """The gcloud argv that deletes the TPU without asking (a queued resource with its TPU)."""
    if tpu.queued:
        return _queued_resource(tpu, "delete") + ["--force", "--quiet"]
    return _node(tpu, "delete") + ["--quiet"]


def describe_node_state(tpu: Tpu, node: str | None = None) -> list[str]:
    """The gcloud argv that prints the TPU VM's (or slice `node`'s) state alone (READY,
    CREATING, PREEMPTED...)."""
    return _node(tpu, "describe", node) + ["--format=value(state)"]


def describe_coordinator_address(tpu: Tpu) -> list[str]:
    """The gcloud argv that prints the internal IP address of slice 0's worker 0."""
    return _node(tpu, "describe", node_names(tpu)[0]) + [
        "--format=value(networkEndpoints[0].ipAddress)"]


def megascale_env(coordinator_address: str, num_slices: int, slice_id: int) -> dict[str, str]:
    """What every worker of slice `slice_id` needs to join a job of `num_slices` slices: the
    Megascale runtime's coordinator, slice count and slice id (jax.distributed also reads them:
    process ids run slice by slice, and slice 0's worker 0 is process 0)."""
    return {"MEGASCALE_COORDINATOR_ADDRESS": coordinator_address,
            "MEGASCALE_PORT": str(MEGASCALE_PORT), "MEGASCALE_NUM_SLICES": str(num_slices),
            "MEGASCALE_SLICE_ID": str(slice_id)}


def describe_queued_resource_state(tpu: Tpu) -> list[str]:
    """The gcloud argv that prints the queued resource's state (ACTIVE, PROVISIONING...)."""
    return _queued_resource(tpu, "describe") + ["--format=value(state.state)"]


def ssh(tpu: Tpu, *, worker: str, command: str, node: str | None = None) -> list[str]:
    """The gcloud argv that runs the shell line `command` on worker `worker` ("all", "0"...)
    of the TPU VM (or of slice `node`)."""
    return _node(tpu, "ssh", node) + [f"--worker={worker}", f"--command={command}"]


def remote_path(path: str) -> str:
    """`path` quoted for the remote shell, a leading `~/` left unquoted so that it expands."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


def setup_command(repo: str | None, branch: str = DEFAULT_BRANCH,
                  gcsfuse: tuple[str, str] | None = None) -> str:
    """Shell line that installs albert-jax into CHECKOUT/.venv, editable, with PIP_EXTRAS.

    With `repo`: CHECKOUT is cloned from it if absent, and `branch` fetched from it and checked
    out, so a second setup updates the code. Without: the checkout already there is installed.
    With `gcsfuse` (bucket, mount point): then also `gcsfuse_steps`.
    """
    steps = []
    if repo:
        steps.append(f"(test -d {CHECKOUT} || git clone --no-checkout {shlex.quote(repo)} "
                     f"{CHECKOUT})")
    steps.append(f"cd {CHECKOUT}")
    if repo:
        steps += [f"git fetch {shlex.quote(repo)} {shlex.quote(branch)}",
                  "git checkout --detach FETCH_HEAD"]
    steps += ["python3 -m pip install --user --upgrade uv",
              f"~/.local/bin/uv venv --allow-existing --python={PYTHON_VERSION} .venv",
              f"~/.local/bin/uv pip install --python=.venv/bin/python -e "
              f"{shlex.quote(f'.[{PIP_EXTRAS}]')}"]
    if gcsfuse:
        steps += gcsfuse_steps(*gcsfuse)
    return " && ".join(steps)


def gcsfuse_steps(bucket: str, mount_point: str) -> list[str]:
    """Shell steps that install Cloud Storage FUSE from Google's apt repository (unless there)
    and mount `bucket` at `mount_point` (unless mounted), owned by the ssh user: a data.dir
    under it is read like a local folder (albert_jax/data/input/shard_copy.py, mode (a)).
    --implicit-dirs shows the folders that exist only as prefixes of object names, as gcsfs
    and gsutil leave them."""
    repository = ("deb [signed-by=/usr/share/keyrings/cloud.google.asc] "
                  "https://packages.cloud.google.com/apt gcsfuse-$(lsb_release -c -s) main")
    mount_point = shlex.quote(mount_point)
    return [f"(command -v gcsfuse >/dev/null || (echo \"{repository}\" | sudo tee "
            "/etc/apt/sources.list.d/gcsfuse.list >/dev/null && curl -fsSL "
            "https://packages.cloud.google.com/apt/doc/apt-key.gpg | sudo tee "
            "/usr/share/keyrings/cloud.google.asc >/dev/null && sudo apt-get update -q && "
            "sudo apt-get install -y -q gcsfuse))",
            f"sudo mkdir -p {mount_point}", f"sudo chown \"$(id -u):$(id -g)\" {mount_point}",
            f"(mountpoint -q {mount_point} || gcsfuse --implicit-dirs {shlex.quote(bucket)} "
            f"{mount_point})"]


def run_command(workdir_setup: str, albert_jax_args: Sequence[str], log_file: str,
                env: dict[str, str] | None = None) -> str:
    """Shell line that runs albert-jax ARGS, its output also appended to `log_file`, with the
    variables `env` exported first.

    Every worker keeps its own log; worker 0's is process 0's. pipefail makes the line's status
    albert-jax's, not tee's (the remote shell of a TPU VM is bash).
    """
    command = command_line.remote_command(workdir_setup, albert_jax_args)
    exports = "".join(f"export {name}={shlex.quote(value)} && "
                      for name, value in (env or {}).items())
    return f"set -o pipefail && {exports}{command} 2>&1 | tee -a {remote_path(log_file)}"


def tail_command(log_file: str) -> str:
    """Shell line that prints the end of `log_file` and follows it (also across a new file)."""
    return f"tail -n 100 -F {remote_path(log_file)}"
