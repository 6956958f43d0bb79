"""The train state, its abstract (shape + sharding) form, and its sharded initialisation.

Boxed vs unboxed, one rule: a TrainState always holds PLAIN (unboxed) arrays; the logical axis
names live only in the boxed tree that `jax.eval_shape(model.init, ...)` returns, and are turned
into NamedShardings there by `sharding.STATE_RULES` (train/sharding.py: the parameter rules, and
the embedding tables split over fsdp too). The optimizer state is built from the boxed params,
so Adam's moments inherit the parameters' logical names and are sharded like them; step
counters are plain and replicated.

  boxed_abstract_state: the boxed shape tree, from one trace of `model.init` (a trace of the
                        model costs about 0.3 s on a CPU: a run makes this one and reuses it).
  shard_abstract_state: the shape/dtype/sharding of every leaf of that tree on a mesh, nothing
                        allocated; the target that Orbax restores onto (so a checkpoint
                        restores onto any mesh). abstract_train_state: both steps at once.
  init_train_state:     one jit with those out_shardings, so params are born sharded.
"""
from __future__ import annotations

from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from albert_jax.train import sharding


@flax.struct.dataclass
class TrainState:
    """step: int32 scalar, the number of optimizer updates applied (the reference global_step);
    params: the model's plain float32 parameter tree; opt_state: the optimizer's state."""

    step: jax.Array
    params: Any
    opt_state: optax.OptState


def _boxed_init(model: nn.Module, optimizer: optax.GradientTransformation,
                inputs: tuple[jax.Array, ...]) -> Callable[[jax.Array], TrainState]:
    """rng -> TrainState with boxed params and opt_state (moments boxed like the params)."""

    def init(rng: jax.Array) -> TrainState:
        params = model.init(rng, *inputs)["params"]
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=optimizer.init(params))

    return init


def boxed_abstract_params(model: nn.Module, inputs: tuple[jax.Array, ...]) -> Any:
    """The boxed (logical axis names) shape tree of the model's params; nothing allocated.
    `inputs` are the positional inputs of `model.init` (a task's `init_inputs()`)."""
    return jax.eval_shape(lambda rng: model.init(rng, *inputs)["params"], jax.random.key(0))


def boxed_abstract_state(model: nn.Module, optimizer: optax.GradientTransformation,
                         inputs: tuple[jax.Array, ...]) -> TrainState:
    """The TrainState of jax.ShapeDtypeStruct with boxed params and moments (their logical axis
    names); nothing allocated. `inputs`: `model.init`'s."""
    return jax.eval_shape(_boxed_init(model, optimizer, inputs), jax.random.key(0))


def shard_abstract_state(boxed: TrainState, mesh: jax.sharding.Mesh
                         ) -> tuple[TrainState, TrainState]:
    """(abstract state, shardings) of `boxed` (a `boxed_abstract_state`) on `mesh`: a TrainState
    of jax.ShapeDtypeStruct with `.sharding` set, and the same tree of NamedSharding (for jit
    in/out_shardings)."""
    shardings = sharding.param_shardings(boxed, mesh, sharding.STATE_RULES)
    abstract = jax.tree.map(
        lambda leaf, leaf_sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                         sharding=leaf_sharding),
        sharding.unbox(boxed), shardings)
    return abstract, shardings


def abstract_train_state(model: nn.Module, optimizer: optax.GradientTransformation,
                         mesh: jax.sharding.Mesh, inputs: tuple[jax.Array, ...]
                         ) -> tuple[TrainState, TrainState]:
    """`shard_abstract_state` of the model's `boxed_abstract_state`. `inputs`: `model.init`'s."""
    return shard_abstract_state(boxed_abstract_state(model, optimizer, inputs), mesh)


def init_train_state(model: nn.Module, optimizer: optax.GradientTransformation,
                     mesh: jax.sharding.Mesh, rng: jax.Array, inputs: tuple[jax.Array, ...],
                     shardings: TrainState | None = None) -> TrainState:
    """A fresh TrainState (step 0), every array born with its sharding on `mesh`: `shardings`
    (`abstract_train_state`'s) where the caller has them, else worked out here."""
    init = _boxed_init(model, optimizer, inputs)
    return sharding.init_sharded(init, mesh, rng, rules=sharding.STATE_RULES,
                                 shardings=shardings)


def param_table(boxed_params: Any, mesh: jax.sharding.Mesh) -> str:
    """sharding.debug_table of the boxed params (`boxed_abstract_state(...).params`) on `mesh`,
    laid out as in the train state."""
    return sharding.debug_table(boxed_params, mesh, sharding.STATE_RULES)
