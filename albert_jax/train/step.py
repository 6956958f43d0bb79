"""The pure train and eval steps of every task (train/task.py), to be jitted by the loop.

Gradient accumulation (T5X style): the batch is split into `num_microbatches` along the batch
axis and a `lax.scan` sums the microbatch gradients. Each microbatch loss is normalised by the
WHOLE batch's denominators (`task.denominators`), which do not depend on the parameters, so the
summed loss and gradient equal those of one big batch exactly.

Given the `mesh` the step is jitted for, the step is traced under `sharding.activation_sharding`
(the model's activations stay split by batch over data x fsdp and by heads/FFN over tensor) and
every microbatch is split over all the data x fsdp devices, so M microbatches hold 1/M of the
activations at a time; without the mesh, the compiler alone picks those layouts (see the
train/sharding.py docstring for what that costs under fsdp).

The gradient crosses data replicas once per step (given the mesh, with mesh.data > 1). Left to
the compiler, every use of a parameter gets its own all-reduce over the batch devices: the
weight gradient of each use is a matmul over the batch rows, which are split over data x fsdp,
and the partitioner reduces its result right there, before the uses' gradients are added. A
shared ALBERT layer used L times was so reduced L times per step (and the tied word embeddings
twice: the lookup's and the MLM output's), each time at the parameter's full size on CPU, where
XLA has no pass that moves the reduction past the sum (the TPU compiler reassociates unrolled
layers). Over several slices that is what crossed the data-center network: albert-base, data=2
over 2 slices x fsdp=4, 343.6 MB per device per step for 11.8 MB of parameters. So the
gradient is computed under `jax.shard_map` with "data" a manual axis (fsdp and tensor stay the
compiler's): each replica differentiates the loss of its own rows into a partial gradient, which
the sum over layers, microbatches and uses adds up locally, and one `psum` over "data" per step
adds the replicas' partial sums, each device putting in its fsdp shard (the all-reduce over the
slices, when "data" spans them). Inside a replica the fsdp reduction is still the compiler's
(within a slice). Not with tensor parallelism, nor where the model runs splash attention and
fsdp splits a replica (`_reduces_per_replica` says why). With dropout each replica draws its masks from the step's key folded with its
replica index, so the draws (not their distribution) depend on mesh.data, as they depend on
num_microbatches; without dropout the losses are those of the whole-batch step.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec

from albert_jax.errors import ConfigError
from albert_jax.model import attention
from albert_jax.train import sharding
from albert_jax.train.task import Batch, Task

Metrics = dict[str, jax.Array]


def check_microbatches(batch_size: int, num_microbatches: int, batch_devices: int) -> None:
    """ConfigError unless `batch_size` splits into `num_microbatches` microbatches that each
    split evenly over the `batch_devices` (data x fsdp) devices."""
    if batch_size % batch_devices:
        raise ConfigError(f"config batch_size={batch_size} is not divisible by the data x fsdp "
                          f"mesh axes ({batch_devices} devices); change batch_size or config.mesh")
    if batch_size % num_microbatches:
        raise ConfigError(f"config batch_size={batch_size} is not divisible by num_microbatches="
                          f"{num_microbatches}; make num_microbatches a divisor of batch_size")
    microbatch_size = batch_size // num_microbatches
    if microbatch_size % batch_devices:
        raise ConfigError(
            f"config batch_size={batch_size} / num_microbatches={num_microbatches} = "
            f"{microbatch_size} examples per microbatch, not a multiple of the data x fsdp = "
            f"{batch_devices} devices that split it"
            + (" (under one example per device)" if microbatch_size < batch_devices else "")
            + "; lower num_microbatches or raise batch_size")


def _split_microbatches(batch: Batch, num_microbatches: int,
                        layout: jax.sharding.Sharding | jax.sharding.PartitionSpec | None) -> Batch:
    """[batch, ...] -> [num_microbatches, batch / num_microbatches, ...], each microbatch laid
    out by `layout` (split over the batch devices; None: the compiler's choice)."""
    batch_size = jax.tree_util.tree_leaves(batch)[0].shape[0]
    microbatch_size = batch_size // num_microbatches

    def split(x: jax.Array) -> jax.Array:
        x = x.reshape(num_microbatches, microbatch_size, *x.shape[1:])
        if layout is None:
            return x
        # Without this the compiler gathers the batch and splits each microbatch only
        # data x fsdp / M ways: every scan iteration then does the whole per-device work.
        return jax.lax.with_sharding_constraint(x, layout)
    return jax.tree_util.tree_map(split, batch)


def _reduces_per_replica(task: Task, mesh: jax.sharding.Mesh | None) -> bool:
    """Whether the step sums the gradient per data replica (module docstring): with a mesh of
    more than one replica, no tensor parallelism, and fsdp only where the model does not run
    splash attention. Two XLA partitioners abort the process (a failed CHECK) otherwise: the
    CPU one with tensor > 1 (tiny at seq 128 on data=2 x fsdp=2 x tensor=2, jax 0.10.2), and
    libtpu 0.0.42.1's where splash's own shard_map nests in the replica's with fsdp > 1 and two
    layers run it (base, data=2 x fsdp=4 on 2 x v5e:2x2). There the compiler's reduction stays
    (libtpu then adds the uses' gradients before they cross slices, the tied word embeddings'
    too since the lookup's gradient is a matmul: model/albert.py `_rows_with_matmul_gradient`)."""
    if mesh is None or mesh.shape[sharding.REPLICA_AXIS] == 1 or mesh.shape["tensor"] > 1:
        return False
    splash = attention.resolve(task.model_config, mesh.devices.flat[0].platform) == "splash"
    return not (splash and mesh.shape["fsdp"] > 1)


def _activation_context(mesh: jax.sharding.Mesh | None) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext() if mesh is None else sharding.activation_sharding(mesh)


def make_train_step(task: Task, optimizer: optax.GradientTransformation,
                    learning_rate_fn: Callable[[jax.Array], jax.Array], *,
                    num_microbatches: int = 1,
                    mesh: jax.sharding.Mesh | None = None) -> Callable[..., tuple[Any, Metrics]]:
    """Returns train_step(state, batch, rng) -> (state, metrics), a pure function to jit.

    `state` has `.step`, `.params`, `.opt_state` and `.replace` (train/state.py TrainState);
    `batch` holds [batch_size, ...] arrays. `mesh`: the mesh the step is jitted for (the module
    docstring says why it matters); the values computed are the same with or without it
    (with dropout, not the masks drawn: module docstring).
    """

    def train_step(state: Any, batch: Batch, rng: jax.Array) -> tuple[Any, Metrics]:
        with _activation_context(mesh):
            return _train_step(state, batch, rng)

    def gradients(params: Any, batch: Batch, dropout_rng: jax.Array, denominators: Any,
                  microbatch_layout: Any) -> tuple[Any, Metrics]:
        """(gradient, loss sums) of the rows of `batch`, summed over its microbatches."""

        def microbatch_loss(params: Any, microbatch: Batch, index: jax.Array):
            outputs = task.apply(params, microbatch, train=True,
                                 rng=jax.random.fold_in(dropout_rng, index))
            sums = task.loss_sums(outputs, microbatch)
            return task.loss(sums, denominators), sums

        grad_fn = jax.value_and_grad(microbatch_loss, has_aux=True)
        if num_microbatches == 1:
            (_, sums), grads = grad_fn(params, batch, jnp.int32(0))
            return grads, sums
        microbatches = _split_microbatches(batch, num_microbatches, microbatch_layout)

        def accumulate(carry, inputs):
            grads_sum, sums_sum = carry
            index, microbatch = inputs
            (_, sums), grads = grad_fn(params, microbatch, index)
            return (jax.tree_util.tree_map(jnp.add, grads_sum, grads),
                    jax.tree_util.tree_map(jnp.add, sums_sum, sums)), None

        zeros_grads = jax.tree_util.tree_map(jnp.zeros_like, params)
        first = jax.tree_util.tree_map(lambda x: x[0], microbatches)
        sums_shape = jax.eval_shape(grad_fn, params, first, jnp.int32(0))[0][1]
        zeros_sums = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), sums_shape)
        (grads, sums), _ = jax.lax.scan(accumulate, (zeros_grads, zeros_sums),
                                        (jnp.arange(num_microbatches), microbatches))
        return grads, sums

    def replica_gradients(params: Any, batch: Batch, dropout_rng: jax.Array,
                          denominators: Any) -> tuple[Any, Metrics]:
        """Run by shard_map once per data replica on its rows: the replica's partial gradient
        and sums, then their one sum over the replicas (module docstring)."""
        replica_rng = jax.random.fold_in(dropout_rng, jax.lax.axis_index(sharding.REPLICA_AXIS))
        with sharding.replica_activation_sharding():
            partial = gradients(params, batch, replica_rng, denominators,
                                sharding.replica_microbatch_spec())
        return jax.lax.psum(partial, sharding.REPLICA_AXIS)

    def _train_step(state: Any, batch: Batch, rng: jax.Array) -> tuple[Any, Metrics]:
        dropout_rng = jax.random.fold_in(rng, state.step)
        # Whole-batch denominators, fixed before the microbatch split (module docstring).
        denominators = task.denominators(batch)
        batch_size = jax.tree_util.tree_leaves(batch)[0].shape[0]
        if num_microbatches > 1:
            check_microbatches(batch_size, num_microbatches, 1 if mesh is None else math.prod(
                mesh.shape[axis] for axis in sharding.BATCH_AXES))
        if not _reduces_per_replica(task, mesh):
            grads, sums = gradients(state.params, batch, dropout_rng, denominators,
                                    None if mesh is None else sharding.microbatch_sharding(mesh))
        else:
            replicated, rows = PartitionSpec(), PartitionSpec(sharding.REPLICA_AXIS)
            grads, sums = jax.shard_map(
                replica_gradients, mesh=mesh, in_specs=(replicated, rows, replicated, replicated),
                out_specs=replicated, axis_names={sharding.REPLICA_AXIS}, check_vma=False,
            )(state.params, batch, dropout_rng, denominators)

        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = task.metrics_from_sums(sums)
        metrics["learning_rate"] = learning_rate_fn(state.step)
        metrics["grad_norm"] = optax.tree.norm(grads)  # before clipping
        metrics["param_norm"] = optax.tree.norm(params)
        return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return train_step


def make_eval_step(task: Task, *, mesh: jax.sharding.Mesh | None = None
                   ) -> Callable[[Any, Batch], tuple[Metrics, Metrics]]:
    """Returns eval_step(params, batch) -> (loss sums, per-example predictions); add the sums
    over batches and concatenate the predictions, then `task.eval_metrics` scores the split.
    `mesh` as for `make_train_step`."""

    def eval_step(params: Any, batch: Batch) -> tuple[Metrics, Metrics]:
        with _activation_context(mesh):
            outputs = task.apply(params, batch, train=False, rng=None)
        predictions = task.predictions(outputs, batch)
        if predictions and "example_weight" in batch:
            predictions["example_weight"] = batch["example_weight"]
        return task.loss_sums(outputs, batch), predictions

    return eval_step


def jit_train_step(task: Task, optimizer: optax.GradientTransformation,
                   learning_rate_fn: Callable[[jax.Array], jax.Array], mesh: jax.sharding.Mesh,
                   state_shardings: Any, *, num_microbatches: int = 1) -> Any:
    """The train step jitted for `mesh`: the state stays where `state_shardings` puts it (and
    is donated), batches are split over the batch axes, the rng and metrics are replicated.
    The one place a train step is jitted: the loop runs it, `albert-jax plan` compiles it."""
    replicated = sharding.replicated(mesh)
    return jax.jit(
        make_train_step(task, optimizer, learning_rate_fn, num_microbatches=num_microbatches,
                        mesh=mesh),
        in_shardings=(state_shardings, sharding.batch_sharding(mesh), replicated),
        out_shardings=(state_shardings, replicated), donate_argnums=(0,))


def jit_eval_step(task: Task, mesh: jax.sharding.Mesh, params_shardings: Any) -> Any:
    """The eval step jitted for `mesh`: params where `params_shardings` puts them, batches split
    over the batch axes, sums and predictions replicated (every host gets them). The one place
    an eval step is jitted: the loop's evaluation, `albert-jax evaluate` and `predict`."""
    return jax.jit(make_eval_step(task, mesh=mesh),
                   in_shardings=(params_shardings, sharding.batch_sharding(mesh)),
                   out_shardings=sharding.replicated(mesh))
