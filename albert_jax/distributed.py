"""Joining the processes of a multi-host run into one JAX system (explicit: `--multihost`).

  distributed.initialize(True)            # detect the cluster: TPU VM pod, SLURM, Open MPI, k8s
  distributed.initialize("mpi4py")        # a named jax cluster detection method
  distributed.initialize(True, coordinator_address="h1:1234", num_processes=2, process_id=1)

Where the settings come from, in order:
1. the arguments (the CLI's --coordinator_address, --num_processes, --process_id);
2. the environment: ALBERT_JAX_COORDINATOR_ADDRESS, ALBERT_JAX_NUM_PROCESSES,
   ALBERT_JAX_PROCESS_ID (what `launch.local` sets; JAX's own JAX_COORDINATOR_ADDRESS works too);
3. jax's cluster detection, for whatever is still missing.
All three given: jax's detection is switched off, so a cluster's variables cannot override or
mix with them (under SLURM, detection would also pin each process to one GPU). Some given and no
cluster detected: an error that names what is missing.

Every process prints one line saying what it joined. On CPU, processes run collectives over
gloo (TCP), jax's default `jax_cpu_collectives_implementation` in 0.10.2: a multi-host config can
be debugged on one machine with `python -m launch.local`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jax._src.clusters import ClusterEnv

ENV_COORDINATOR_ADDRESS = "ALBERT_JAX_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "ALBERT_JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "ALBERT_JAX_PROCESS_ID"
_JAX_ENV_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"

# jax's cluster detection methods (jax/_src/clusters/) that `multihost` may name. The others are
# tried in this order when multihost=True; "mpi4py" (any MPI) is used only when named.
CLUSTERS = {
    "ompi": "Open MPI",
    "slurm": "SLURM",
    "gketpu": "Cloud TPU on GKE",
    "gcetpu": "Cloud TPU VM",
    "mpi4py": "MPI (mpi4py)",
}
_EXPLICIT_HINT = ("pass --coordinator_address=HOST:PORT (process 0's host and a free port) "
                  "--num_processes=N --process_id=I to every process (or set "
                  f"{ENV_COORDINATOR_ADDRESS}, {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}), or start "
                  "them with `python -m launch.local` / `python -m launch.gpu`")


def initialize(multihost: bool | str, *, coordinator_address: str | None = None,
               num_processes: int | None = None, process_id: int | None = None) -> None:
    """Calls `jax.distributed.initialize` if `multihost` asks for it; a no-op for False.

    multihost: False (one process), True (settings from the arguments, the environment, then
      jax's cluster detection) or the name of a jax cluster detection method (`CLUSTERS`).
    Must run before anything touches a JAX device. Raises ValueError for settings given without
    `multihost`, malformed or half-given settings, or a named cluster that is not present.
    """
    given = {"--coordinator_address": coordinator_address, "--num_processes": num_processes,
             "--process_id": process_id}
    if multihost is False:
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise ValueError(f"{', '.join(named)} given without --multihost: add --multihost to "
                             "run as one process of a multi-host job")
        return
    if multihost is not True and multihost not in CLUSTERS:
        raise ValueError(f"--multihost={multihost!r}: use true, false or one of jax's cluster "
                         f"detection methods {sorted(CLUSTERS)}")
    settings = {  # name -> (value, where it came from: the flag's name or the variable's)
        "coordinator_address": _setting(coordinator_address, "--coordinator_address", str,
                                        ENV_COORDINATOR_ADDRESS, _JAX_ENV_COORDINATOR_ADDRESS),
        "num_processes": _setting(num_processes, "--num_processes", int, ENV_NUM_PROCESSES),
        "process_id": _setting(process_id, "--process_id", int, ENV_PROCESS_ID),
    }
    _check_settings(settings)
    missing = [source for value, source in settings.values() if value is None]
    if isinstance(multihost, str):
        method, cluster = multihost, _named_cluster(multihost)
    elif not missing:
        method, cluster = "deactivate", "explicit settings"
    else:
        method, cluster = None, _detected_cluster()
        if cluster is None:
            raise ValueError(
                f"--multihost: no cluster environment detected (Cloud TPU, SLURM, Open MPI, "
                f"Kubernetes) and {', '.join(missing)} not given: {_EXPLICIT_HINT}")
        if len(missing) < len(settings):
            cluster += " with the given " + ", ".join(
                source for value, source in settings.values() if value is not None)

    import jax  # here, not at the top: the CLI imports this module before any JAX work
    jax.distributed.initialize(**{name: value for name, (value, _) in settings.items()},
                               cluster_detection_method=method)
    devices = jax.local_devices()
    print(f"multihost: process {jax.process_index()} of {jax.process_count()}, "
          f"{len(devices)} local / {jax.device_count()} global {devices[0].platform} devices "
          f"(cluster: {cluster})", flush=True)


def _setting(value: Any, flag: str, parse: type, *env_names: str) -> tuple[Any, str]:
    """(value, source): the argument if given, else the first set variable of `env_names`."""
    if value is not None:
        return value, flag
    for name in env_names:
        if os.environ.get(name):
            try:
                return parse(os.environ[name]), name
            except ValueError:
                raise ValueError(f"environment variable {name}={os.environ[name]!r} is not "
                                 f"a valid {flag[2:]}") from None
    return None, flag


def _check_settings(settings: dict[str, tuple[Any, str]]) -> None:
    (address, address_source), (count, count_source), (index, index_source) = (
        settings["coordinator_address"], settings["num_processes"], settings["process_id"])
    if address is not None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{address_source}={address!r} is not HOST:PORT (e.g. "
                             "10.0.0.1:1234: the host of process 0 and a free port)")
    if count is not None and count < 1:
        raise ValueError(f"{count_source}={count} must be at least 1")
    if index is not None:
        if index < 0:
            raise ValueError(f"{index_source}={index} must be at least 0")
        if count is not None and index >= count:
            raise ValueError(f"{index_source}={index} must be below {count_source}={count} "
                             f"(process ids are 0 .. {count - 1})")


def _cluster_types() -> list[type[ClusterEnv]]:
    # jax has no public way to ask which environment it would detect; its detection walks this
    # list in this order (jax/_src/clusters/__init__.py), so asking it names what jax will use.
    from jax._src import clusters
    return list(clusters.ClusterEnv._cluster_types)


def _detected_cluster() -> str | None:
    """What jax's detection (multihost=True) will use, in words; None if nothing is present."""
    for cluster_type in _cluster_types():
        if not cluster_type.opt_in_only_method and cluster_type.is_env_present():
            return CLUSTERS.get(cluster_type.name) or cluster_type.__name__  # K8sCluster: no name
    return None


def _named_cluster(method: str) -> str:
    cluster_type = next(cluster_type for cluster_type in _cluster_types()
                        if cluster_type.name == method)
    # jax only logs an error for a named method that is absent, then goes on and fails obscurely.
    if not cluster_type.is_env_present():
        raise ValueError(f"--multihost={method}: no {CLUSTERS[method]} environment here (start "
                         f"the processes with its launcher, or use --multihost=true)")
    return CLUSTERS[method]
