"""The checks of a run config that need neither data nor a workdir.

The loop runs them before it takes the workdir's lock or writes anything there, so a command
with a bad value fails in one line and leaves the workdir as it was (a later correct command
in the same workdir is not refused as "incompatible config"). The fine-tuning commands run the
number checks before they even read the checkpoint of `init_from`.
"""
from __future__ import annotations

import jax
import ml_collections

from albert_jax.errors import ConfigError
from albert_jax.train import buckets, optim, reporting, sharding
from albert_jax.train import step as step_lib

# Run-config keys that count something: at least 1 when the config has them.
POSITIVE_INTEGERS = ("batch_size", "eval_batch_size", "total_steps", "seq_len",
                     "num_microbatches", "log_every_steps", "eval_every_steps",
                     "checkpoint_every_steps", "keep_checkpoints", "seeds")
COMPUTE_DTYPES = ("float32", "bfloat16")


def check_numbers(config: ml_collections.ConfigDict) -> None:
    """ConfigError naming the first key whose value cannot work: counts below 1, a compute
    dtype we do not have, a dropout outside [0, 1), an optimizer value outside its range, a
    length bucket that is not a positive integer, a tracker we do not know or whose package
    is missing, a profile window before step 1."""
    for key in POSITIVE_INTEGERS:
        if key in config and config[key] < 1:
            raise ConfigError(f"config {key}={config[key]} must be a positive integer")
    if "compute_dtype" in config and config.compute_dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"config compute_dtype={config.compute_dtype!r}: choose one of "
                          f"{COMPUTE_DTYPES}")
    for key in ("dropout", "classifier_dropout"):
        if key in config and not 0 <= config[key] < 1:
            raise ConfigError(f"config {key}={config[key]} must be in [0, 1)")
    if "optim" in config and "total_steps" in config:
        optim.make_optimizer(config.optim, config.total_steps)  # every optim.* value
    if "length_buckets" in config and "seq_len" in config:
        buckets.lengths_of(config)
    if "report_to" in config:
        reporting.report_to(config)  # an unknown name, or a tracker's package not installed
    if "profile" in config and (config.profile.num_steps < 0 or config.profile.start_step < 1):
        raise ConfigError(f"config profile.start_step={config.profile.start_step}, "
                          f"profile.num_steps={config.profile.num_steps}: steps count from 1, "
                          "and num_steps 0 turns the profiler off")


def check_run(config: ml_collections.ConfigDict, num_devices: int | None = None) -> None:
    """`check_numbers`, then the mesh over `num_devices` (default: this job's devices) and the
    batch split over it."""
    check_numbers(config)
    data, fsdp, _ = sharding.mesh_shape(config.mesh, num_devices or jax.device_count())
    step_lib.check_microbatches(config.batch_size, config.num_microbatches, data * fsdp)
