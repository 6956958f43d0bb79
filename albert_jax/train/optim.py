"""LAMB exactly as the reference (SPEC 6.3), AdamW for fine-tuning (SPEC 6.4), schedules (SPEC 6.1).

`optax.lamb` is not the reference (SPEC 6.5): it bias-corrects the Adam moments and applies the
trust ratio to every parameter. Here LAMB is a chain of optax transformations:

  Adam moments WITHOUT bias correction, eps outside the sqrt    u = m / (sqrt(v) + eps)
  -> decoupled weight decay, masked                             u += wd * w
  -> trust ratio ||w|| / ||u|| per variable, masked             u *= r   (r = 1 if a norm is 0)
  -> learning rate (a float or a schedule)                      w -= lr * u

Global-norm clipping (SPEC 6.2, `clip_by_global_norm`) is chained in front by `make_optimizer`,
not inside `lamb`.

Masks (SPEC 6.3): the reference runs `re.search` for "LayerNorm", "layer_norm" and "bias" on the
variable name; a match gets neither weight decay nor the trust ratio. We run the same search on
the "/"-joined parameter path, so every LayerNorm scale/bias, every Dense bias and
`predictions/output_bias` are excluded; embeddings and kernels are decayed. The masks are derived
from the paths of whatever tree the optimizer sees, plain or boxed (`nn.LogicallyPartitioned`).

"Per variable" (SPEC 6.3): a shared block is one variable, so its norms cover the whole array.
Parameters that are NOT shared across layers are stacked by the encoder's `nn.scan` on a leading
layers axis under `group_{g}_per_layer/...` (model/encoder.py); the reference has one variable per
layer there, so their norms are taken per layer slice.
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax

from albert_jax.errors import ConfigError
from albert_jax.train.tree_names import path_name

# SPEC 6.3: exclude_from_weight_decay; exclude_from_layer_adaptation defaults to the same list.
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
# model/encoder.py names the scope of the parameters stacked on a leading layers axis.
LAYER_STACKED_SCOPE = re.compile(r"(^|/)group_\d+_per_layer(/|$)")

Schedule = Callable[[jax.Array | int], jax.Array]


def is_excluded(name: str) -> bool:
    """True for a parameter that gets neither weight decay nor the trust ratio (SPEC 6.3)."""
    return any(re.search(pattern, name) for pattern in EXCLUDE_FROM_WEIGHT_DECAY)


def weight_decay_mask(params: Any) -> Any:
    """A tree like `params` (plain or boxed) of bools: True where weight decay applies.

    The same mask selects the parameters that get the trust ratio (SPEC 6.3).
    """
    return jax.tree_util.tree_map_with_path(lambda path, _: not is_excluded(path_name(path)),
                                            params)


class ScaleByMomentsState(NamedTuple):
    """The reference's slot variables `<var>/adam_m` and `<var>/adam_v` (SPEC 6.3), float32."""

    mu: optax.Updates
    nu: optax.Updates


def scale_by_adam_without_bias_correction(beta_1: float, beta_2: float,
                                          epsilon: float) -> optax.GradientTransformation:
    """u = m / (sqrt(v) + eps) with m, v the raw moving averages: no bias correction (SPEC 6.3)."""

    def init_fn(params: optax.Params) -> ScaleByMomentsState:
        def zeros(p: jax.Array) -> jax.Array:
            return jnp.zeros_like(p, dtype=jnp.float32)

        return ScaleByMomentsState(mu=jax.tree.map(zeros, params), nu=jax.tree.map(zeros, params))

    def update_fn(updates: optax.Updates, state: ScaleByMomentsState,
                  params: optax.Params | None = None) -> tuple[optax.Updates, ScaleByMomentsState]:
        del params
        mu = jax.tree.map(lambda m, g: beta_1 * m + (1.0 - beta_1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: beta_2 * v + (1.0 - beta_2) * jnp.square(g),
                          state.nu, updates)
        scaled = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + epsilon), mu, nu)
        return scaled, ScaleByMomentsState(mu=mu, nu=nu)

    return optax.GradientTransformation(init_fn, update_fn)


def _trust_ratio(param: jax.Array, update: jax.Array, per_layer: bool) -> jax.Array:
    """||w|| / ||u||, or 1 where either norm is 0; no clamping (SPEC 6.3).

    Over the whole array, or per slice of the leading layers axis when `per_layer`.
    """
    axes = tuple(range(1, param.ndim)) if per_layer else None
    param_norm = jnp.sqrt(jnp.sum(jnp.square(param.astype(jnp.float32)), axis=axes, keepdims=True))
    update_norm = jnp.sqrt(jnp.sum(jnp.square(update.astype(jnp.float32)), axis=axes,
                                   keepdims=True))
    either_zero = (param_norm == 0.0) | (update_norm == 0.0)
    # The inner where keeps the unused branch finite when update_norm is 0.
    ratio = param_norm / jnp.where(either_zero, 1.0, update_norm)
    return jnp.where(either_zero, 1.0, ratio)


def scale_by_masked_trust_ratio() -> optax.GradientTransformation:
    """u *= ||w|| / ||u|| for every parameter the weight-decay mask selects (SPEC 6.3)."""

    def update_fn(updates: optax.Updates, state: optax.EmptyState,
                  params: optax.Params | None = None) -> tuple[optax.Updates, optax.EmptyState]:
        if params is None:
            raise ValueError("the LAMB trust ratio needs the parameters: call "
                             "optimizer.update(grads, opt_state, params)")

        def scale(path: tuple[Any, ...], update: jax.Array, param: jax.Array) -> jax.Array:
            name = path_name(path)
            if is_excluded(name):
                return update
            per_layer = bool(LAYER_STACKED_SCOPE.search(name))
            return (update * _trust_ratio(param, update, per_layer)).astype(update.dtype)

        return jax.tree_util.tree_map_with_path(scale, updates, params), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """The reference's tf.clip_by_global_norm (SPEC 6.2): g * max_norm / max(||g||, max_norm).

    One scalar factor for all leaves, as TF computes it. optax.clip_by_global_norm divides every
    element by the norm behind a select, which XLA did not fuse into the optimizer's pass: it
    wrote the clipped gradients out and read them back (albert-base LAMB update: 944 MB
    accessed, 755 MB with this; benchmarks/RESULTS.md, "LAMB as one fused pass"). The state is
    optax's (EmptyState).
    """

    def update_fn(updates: optax.Updates, state: optax.EmptyState,
                  params: optax.Params | None = None) -> tuple[optax.Updates, optax.EmptyState]:
        del params
        factor = max_norm / jnp.maximum(optax.tree.norm(updates), max_norm)
        return jax.tree.map(lambda g: (g * factor).astype(g.dtype), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def lamb(learning_rate: float | Schedule, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
         beta_2: float = 0.999, epsilon: float = 1e-6) -> optax.GradientTransformation:
    """The reference LAMB update (SPEC 6.3); the optimizer state holds mu, nu per parameter."""
    return optax.chain(
        scale_by_adam_without_bias_correction(beta_1, beta_2, epsilon),
        optax.add_decayed_weights(weight_decay_rate, mask=weight_decay_mask),
        scale_by_masked_trust_ratio(),
        optax.scale_by_learning_rate(learning_rate),
    )


def adamw(learning_rate: float | Schedule, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
          beta_2: float = 0.999, epsilon: float = 1e-6) -> optax.GradientTransformation:
    """The reference AdamWeightDecayOptimizer (SPEC 6.4): LAMB without the trust ratio."""
    return optax.chain(
        scale_by_adam_without_bias_correction(beta_1, beta_2, epsilon),
        optax.add_decayed_weights(weight_decay_rate, mask=weight_decay_mask),
        optax.scale_by_learning_rate(learning_rate),
    )


# ---------------------------------------------------------------------------------------------
# Learning-rate schedules. Each maps the optimizer step (0 for the first update, as the
# reference's global_step) to a float32 learning rate.


def _check_steps(warmup_steps: int, total_steps: int) -> None:
    if total_steps < 1:
        raise ConfigError(f"total_steps={total_steps} must be at least 1")
    # warmup_steps > total_steps is allowed (as in the reference): the run ends in warmup,
    # which short smoke runs of a full-size config do.
    if warmup_steps < 0:
        raise ConfigError(f"optim.warmup_steps={warmup_steps} must be >= 0")


def _warmup(init_lr: float, warmup_steps: int, step: jax.Array,
            after_warmup: jax.Array) -> jax.Array:
    """init_lr * step / W for step < W (SPEC 6.1, start_warmup_step = 0), else `after_warmup`."""
    if warmup_steps == 0:
        return after_warmup
    return jnp.where(step < warmup_steps, init_lr * step / warmup_steps, after_warmup)


def reference_schedule(init_lr: float, warmup_steps: int, total_steps: int,
                       power: float = 1.0) -> Schedule:
    """SPEC 6.1 exactly: linear warmup, then init_lr * (1 - min(step, T) / T) ** power.

    The decay is measured from step 0, not from the end of warmup, so the rate jumps from
    init_lr * (W - 1) / W to init_lr * (1 - W / T) at step W (the reference's quirk).
    """
    _check_steps(warmup_steps, total_steps)

    def schedule(step: jax.Array | int) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        decayed = init_lr * (1.0 - jnp.minimum(step, total_steps) / total_steps) ** power
        return _warmup(init_lr, warmup_steps, step, decayed)

    return schedule


def linear_schedule(init_lr: float, warmup_steps: int, total_steps: int) -> Schedule:
    """Linear warmup to init_lr at step W, then linear decay to 0 at step T (no jump at W)."""
    _check_steps(warmup_steps, total_steps)
    decay_steps = max(total_steps - warmup_steps, 1)

    def schedule(step: jax.Array | int) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        progress = jnp.clip((step - warmup_steps) / decay_steps, 0.0, 1.0)
        return _warmup(init_lr, warmup_steps, step, init_lr * (1.0 - progress))

    return schedule


def cosine_schedule(init_lr: float, warmup_steps: int, total_steps: int) -> Schedule:
    """Linear warmup to init_lr at step W, then half a cosine down to 0 at step T."""
    _check_steps(warmup_steps, total_steps)
    decay_steps = max(total_steps - warmup_steps, 1)

    def schedule(step: jax.Array | int) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        progress = jnp.clip((step - warmup_steps) / decay_steps, 0.0, 1.0)
        return _warmup(init_lr, warmup_steps, step,
                       init_lr * 0.5 * (1.0 + jnp.cos(math.pi * progress)))

    return schedule


def constant_schedule(init_lr: float, warmup_steps: int, total_steps: int) -> Schedule:
    """Linear warmup to init_lr at step W, then init_lr."""
    _check_steps(warmup_steps, total_steps)

    def schedule(step: jax.Array | int) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        return _warmup(init_lr, warmup_steps, step, jnp.full_like(step, init_lr))

    return schedule


SCHEDULES = ("reference", "linear", "cosine", "constant")
OPTIMIZERS = {"lamb": lamb, "adamw": adamw}


def make_schedule(name: str, init_lr: float, warmup_steps: int, total_steps: int,
                  power: float = 1.0) -> Schedule:
    """The schedule called `name` (one of SCHEDULES); `power` applies to "reference" only."""
    if name == "reference":
        return reference_schedule(init_lr, warmup_steps, total_steps, power)
    if power != 1.0:
        raise ConfigError(f"optim.power={power} applies to optim.schedule='reference' only "
                          f"(got optim.schedule={name!r}); set optim.power=1.0")
    builders = {"linear": linear_schedule, "cosine": cosine_schedule,
                "constant": constant_schedule}
    if name not in builders:
        raise ConfigError(f"unknown optim.schedule={name!r}; choose one of {SCHEDULES}")
    return builders[name](init_lr, warmup_steps, total_steps)


_OPTIM_KEYS = ("name", "lr", "warmup_steps", "schedule", "power", "weight_decay", "beta_1",
               "beta_2", "epsilon", "clip_norm")


def make_optimizer(optim_config: ml_collections.ConfigDict,
                   total_steps: int) -> tuple[optax.GradientTransformation, Schedule]:
    """The optimizer of a run config's `optim` section and its learning-rate schedule.

    Global-norm clipping to `optim.clip_norm` comes first (SPEC 6.2; 0 disables it), then LAMB
    (SPEC 6.3) or AdamW (SPEC 6.4) with the schedule. Returns (optimizer, schedule) so the
    trainer can log the rate of each step.
    """
    missing = [key for key in _OPTIM_KEYS if key not in optim_config]
    if missing:
        raise ConfigError(f"config optim section lacks key(s) {missing}; it needs {_OPTIM_KEYS}")
    if optim_config.name not in OPTIMIZERS:
        raise ConfigError(f"unknown optim.name={optim_config.name!r}; choose one of "
                          f"{sorted(OPTIMIZERS)}")
    ranges = {"lr": (lambda value: value > 0, "> 0"),
              "weight_decay": (lambda value: value >= 0, ">= 0"),
              "beta_1": (lambda value: 0 <= value < 1, "in [0, 1)"),
              "beta_2": (lambda value: 0 <= value < 1, "in [0, 1)"),
              "epsilon": (lambda value: value > 0, "> 0"),
              "clip_norm": (lambda value: value >= 0, ">= 0 (0 disables clipping)")}
    for key, (holds, wanted) in ranges.items():
        value = optim_config[key]
        if not math.isfinite(value) or not holds(value):
            raise ConfigError(f"config optim.{key}={value} must be {wanted}")
    schedule = make_schedule(optim_config.schedule, optim_config.lr, optim_config.warmup_steps,
                             total_steps, optim_config.power)
    optimizer = OPTIMIZERS[optim_config.name](
        schedule, weight_decay_rate=optim_config.weight_decay, beta_1=optim_config.beta_1,
        beta_2=optim_config.beta_2, epsilon=optim_config.epsilon)
    if optim_config.clip_norm > 0:
        optimizer = optax.chain(clip_by_global_norm(optim_config.clip_norm), optimizer)
    return optimizer, schedule
