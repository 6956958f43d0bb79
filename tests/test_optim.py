"""LAMB / AdamW against a NumPy port of the reference (SPEC 6.3, 6.4); schedules (SPEC 6.1)."""
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from albert_jax.errors import ConfigError
from albert_jax.model import AlbertForPreTraining, get_config
from albert_jax.pretraining import init_inputs as pretraining_init_inputs
from albert_jax.train import optim, tree_names

BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01


def reference_step(params, grads, slots, lr, trust_ratio=True):
    """One step of the reference optimizer on {name: float64 array}: lamb_optimizer.py (SPEC 6.3),
    or AdamWeightDecayOptimizer (SPEC 6.4) when trust_ratio=False. Returns (params, slots)."""
    new_params, new_slots = {}, {}
    for name, w in params.items():
        g = grads[name]
        m, v = slots[name]
        m = BETA_1 * m + (1.0 - BETA_1) * g
        v = BETA_2 * v + (1.0 - BETA_2) * g * g
        update = m / (np.sqrt(v) + EPSILON)
        use_decay = not any(re.search(pattern, name)
                            for pattern in ("LayerNorm", "layer_norm", "bias"))
        if use_decay:
            update = update + WEIGHT_DECAY * w
        ratio = 1.0
        if trust_ratio and use_decay:
            w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        new_params[name] = w - ratio * lr * update
        new_slots[name] = (m, v)
    return new_params, new_slots


def nest(flat):
    tree = {}
    for name, value in flat.items():
        *scopes, leaf = name.split("/")
        node = tree
        for scope in scopes:
            node = node.setdefault(scope, {})
        node[leaf] = value
    return tree


def flatten(tree):
    return {tree_names.path_name(path): np.asarray(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


# Per-layer (unshared) parameters are stacked [layers, ...] by the encoder; the reference has one
# variable per layer, so the NumPy port sees them as separate variables "…/kernel@layer".
STACKED = "encoder/group_0_per_layer/inner_group_0/ffn/intermediate/kernel"


def make_tree(seed):
    rng = np.random.default_rng(seed)
    shapes = {
        "embeddings/word_embeddings/embedding": (11, 4),
        "embeddings/LayerNorm/scale": (4,),
        "embeddings/LayerNorm/bias": (4,),
        "encoder/group_0/inner_group_0/attention/query/kernel": (4, 6),
        "encoder/group_0/inner_group_0/attention/query/bias": (6,),
        "encoder/group_0/inner_group_0/attention/layer_norm_custom/kernel": (4, 4),
        STACKED: (3, 4, 5),
        "predictions/output_bias": (11,),
        "zero_init/kernel": (4, 3),
    }
    # Scales far from the update's (about 1 per element) so the trust ratio is far from 1.
    params = {name: 0.05 * rng.normal(size=shape) for name, shape in shapes.items()}
    params["embeddings/word_embeddings/embedding"] *= 60.0
    params["zero_init/kernel"][:] = 0.0  # ||w|| = 0 -> ratio 1
    params[STACKED][0] *= 40.0  # per-layer norms differ from the whole array's
    params[STACKED][1] = 0.0  # one zero layer slice
    return params, shapes


def make_grads(rng, shapes):
    grads = {name: rng.normal(size=shape) for name, shape in shapes.items()}
    grads["embeddings/LayerNorm/bias"][:] = 0.0
    return grads


def split_layers(flat):
    out = {}
    for name, value in flat.items():
        if name == STACKED:
            out.update({f"{name}@{layer}": value[layer] for layer in range(value.shape[0])})
        else:
            out[name] = value
    return out


def join_layers(flat):
    out = {name: value for name, value in flat.items() if "@" not in name}
    out[STACKED] = np.stack([flat[f"{STACKED}@{layer}"] for layer in range(3)])
    return out


@pytest.mark.parametrize("name,trust_ratio", [("lamb", True), ("adamw", False)])
def test_steps_match_numpy_reference(name, trust_ratio):
    params, shapes = make_tree(0)
    rng = np.random.default_rng(1)
    lr = 0.01
    optimizer = optim.OPTIMIZERS[name](lr, WEIGHT_DECAY, BETA_1, BETA_2, EPSILON)
    jax_params = nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    opt_state = optimizer.init(jax_params)
    ref_params = split_layers(params)
    ref_slots = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in ref_params.items()}
    update = jax.jit(optimizer.update)
    for _ in range(3):
        grads = make_grads(rng, shapes)
        jax_grads = nest({k: jnp.asarray(v, jnp.float32) for k, v in grads.items()})
        updates, opt_state = update(jax_grads, opt_state, jax_params)
        jax_params = optax.apply_updates(jax_params, updates)
        ref_params, ref_slots = reference_step(ref_params, split_layers(grads), ref_slots, lr,
                                               trust_ratio)
        expected = join_layers(ref_params)
        for key, value in flatten(jax_params).items():
            np.testing.assert_allclose(value, expected[key], rtol=1e-6, atol=1e-6, err_msg=key)


def test_optax_lamb_differs_from_reference():
    """SPEC 6.5: optax.lamb bias-corrects and adapts LayerNorm/bias too; ours must not."""
    params, shapes = make_tree(0)
    grads = make_grads(np.random.default_rng(1), shapes)
    jax_params = nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    jax_grads = nest({k: jnp.asarray(v, jnp.float32) for k, v in grads.items()})

    def one_update(optimizer):
        return jax.jit(lambda grads, params: optimizer.update(
            grads, optimizer.init(params), params)[0])(jax_grads, jax_params)

    ours = flatten(one_update(optim.lamb(0.01)))
    theirs = flatten(one_update(optax.lamb(0.01, eps=EPSILON, weight_decay=WEIGHT_DECAY)))
    assert not np.allclose(ours["embeddings/LayerNorm/scale"], theirs["embeddings/LayerNorm/scale"])


def pretraining_params():
    model = AlbertForPreTraining(get_config("tiny"))
    return jax.eval_shape(lambda rng: model.init(rng, *pretraining_init_inputs(8, 2)),
                          jax.random.key(0))["params"]


DECAYED = {
    "albert/embeddings/word_embeddings/embedding",
    "albert/embeddings/token_type_embeddings/embedding",
    "albert/embeddings/position_embeddings/embedding",
    "albert/encoder/embedding_hidden_mapping_in/kernel",
    "albert/encoder/group_0/inner_group_0/attention/query/kernel",
    "albert/encoder/group_0/inner_group_0/attention/key/kernel",
    "albert/encoder/group_0/inner_group_0/attention/value/kernel",
    "albert/encoder/group_0/inner_group_0/attention/output/kernel",
    "albert/encoder/group_0/inner_group_0/ffn/intermediate/kernel",
    "albert/encoder/group_0/inner_group_0/ffn/output/kernel",
    "albert/pooler/kernel",
    "predictions/dense/kernel",
    "seq_relationship/dense/kernel",
}


def test_mask_on_pretraining_tree_names_exactly_kernels_and_embeddings():
    boxed = pretraining_params()
    unboxed = nn.unbox(boxed)
    for tree in (boxed, unboxed):
        mask = jax.tree_util.tree_flatten_with_path(optim.weight_decay_mask(tree))[0]
        # Boxed paths end in the box's `.value`; strip it to compare names.
        decayed = {tree_names.path_name(path).removesuffix("/value") for path, keep in mask if keep}
        assert decayed == DECAYED
        assert len(mask) == 32  # every leaf is in the mask, excluded or not


def test_boxed_and_plain_trees_get_the_same_update():
    params, shapes = make_tree(4)
    grads = make_grads(np.random.default_rng(5), shapes)
    plain = nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    plain_grads = nest({k: jnp.asarray(v, jnp.float32) for k, v in grads.items()})
    def box(x):
        return nn.LogicallyPartitioned(x, names=(None,) * x.ndim)

    boxed, boxed_grads = jax.tree.map(box, plain), jax.tree.map(box, plain_grads)
    optimizer = optim.lamb(1e-3)

    @jax.jit
    def update(grads, params):
        return optimizer.update(grads, optimizer.init(params), params)[0]

    boxed_updates = update(boxed_grads, boxed)
    assert isinstance(boxed_updates["predictions"]["output_bias"], nn.LogicallyPartitioned)
    jax.tree.map(np.testing.assert_array_equal, nn.unbox(boxed_updates),
                 update(plain_grads, plain))


def test_reference_schedule_values():
    init_lr, warmup, total = 0.00176, 4, 100  # SPEC 6.1
    schedule = optim.reference_schedule(init_lr, warmup, total)
    np.testing.assert_allclose(schedule(0), 0.0)
    np.testing.assert_allclose(schedule(warmup - 1), 0.00176 * 3 / 4, rtol=1e-6)
    # The jump at W: decay is measured from step 0, so W gives init_lr * (1 - 4/100).
    np.testing.assert_allclose(schedule(warmup), 0.00176 * 0.96, rtol=1e-6)
    np.testing.assert_allclose(schedule(50), 0.00088, rtol=1e-6)
    np.testing.assert_allclose(schedule(total), 0.0)
    np.testing.assert_allclose(schedule(total + 7), 0.0)
    squared = optim.reference_schedule(init_lr, warmup, total, power=2.0)
    np.testing.assert_allclose(squared(50), 0.00176 * 0.25, rtol=1e-6)
    np.testing.assert_allclose(optim.reference_schedule(1.0, 0, 10)(0), 1.0)  # no warmup


def test_alternative_schedules():
    init_lr, warmup, total = 0.5, 10, 110
    linear = optim.make_schedule("linear", init_lr, warmup, total)
    cosine = optim.make_schedule("cosine", init_lr, warmup, total)
    constant = optim.make_schedule("constant", init_lr, warmup, total)
    for schedule in (linear, cosine, constant):
        np.testing.assert_allclose(schedule(0), 0.0)
        np.testing.assert_allclose(schedule(9), 0.45, rtol=1e-6)
        np.testing.assert_allclose(schedule(10), 0.5, rtol=1e-6)  # no jump
    np.testing.assert_allclose(linear(60), 0.25, rtol=1e-6)
    np.testing.assert_allclose(linear(35), 0.375, rtol=1e-6)
    np.testing.assert_allclose(cosine(60), 0.25, rtol=1e-6)
    np.testing.assert_allclose(cosine(35), 0.25 * (1 + np.cos(np.pi / 4)), rtol=1e-6)
    np.testing.assert_allclose(constant(100), 0.5)
    for schedule in (linear, cosine):
        np.testing.assert_allclose(schedule(110), 0.0, atol=1e-8)
        np.testing.assert_allclose(schedule(500), 0.0, atol=1e-8)


def optim_config(**overrides):
    config = ml_collections.ConfigDict(dict(
        name="lamb", lr=0.01, warmup_steps=0, schedule="constant", power=1.0, weight_decay=0.01,
        beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
    config.update(overrides)
    return config


def test_clip_then_lamb_equals_clipping_by_hand():
    params, shapes = make_tree(2)
    grads = make_grads(np.random.default_rng(3), shapes)
    jax_params = nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    jax_grads = nest({k: jnp.asarray(10 * v, jnp.float32) for k, v in grads.items()})
    optimizer, schedule = optim.make_optimizer(optim_config(), total_steps=50)
    np.testing.assert_allclose(schedule(3), 0.01)
    def first_update(optimizer):
        return jax.jit(lambda grads, params: optimizer.update(
            grads, optimizer.init(params), params)[0])(jax_grads, jax_params)

    updates = first_update(optimizer)

    global_norm = np.sqrt(sum(np.sum((10 * g) ** 2) for g in grads.values()))
    assert global_norm > 1.0
    clipped = {k: 10 * v / global_norm for k, v in grads.items()}
    ref_params = split_layers(params)
    ref_slots = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in ref_params.items()}
    ref_params, _ = reference_step(ref_params, split_layers(clipped), ref_slots, 0.01)
    expected = join_layers(ref_params)
    new_params = flatten(optax.apply_updates(jax_params, updates))
    for key, value in new_params.items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-6, atol=1e-6, err_msg=key)

    # clip_norm=0 disables clipping: the same grads then give a different step.
    unclipped, _ = optim.make_optimizer(optim_config(clip_norm=0.0), total_steps=50)
    updates_unclipped = first_update(unclipped)
    assert not np.allclose(flatten(updates_unclipped)["embeddings/LayerNorm/scale"],
                           flatten(updates)["embeddings/LayerNorm/scale"])


def test_make_optimizer_uses_the_schedule_per_step():
    params = {"dense": {"kernel": jnp.ones((2, 2))}}
    optimizer, schedule = optim.make_optimizer(
        optim_config(schedule="reference", warmup_steps=2, lr=0.1), total_steps=10)
    state = optimizer.init(params)
    grads = {"dense": {"kernel": jnp.full((2, 2), 0.5)}}
    updates, state = optimizer.update(grads, state, params)
    np.testing.assert_array_equal(updates["dense"]["kernel"], 0.0)  # step 0: lr 0 (SPEC 6.1)
    updates, state = optimizer.update(grads, state, params)
    assert np.all(np.asarray(updates["dense"]["kernel"]) < 0)
    np.testing.assert_allclose(schedule(1), 0.05)


@pytest.mark.parametrize("overrides,message", [
    (dict(name="sgd"), "optim.name='sgd'"),
    (dict(schedule="step"), "optim.schedule='step'"),
    (dict(schedule="linear", power=2.0), "optim.power=2.0"),
    (dict(warmup_steps=-1), "optim.warmup_steps=-1"),
    (dict(clip_norm=-1.0), "optim.clip_norm=-1.0"),
])
def test_make_optimizer_errors_name_key_and_value(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        optim.make_optimizer(optim_config(**overrides), total_steps=50)


def test_make_optimizer_missing_key():
    config = optim_config()
    del config["clip_norm"]
    with pytest.raises(ConfigError, match="clip_norm"):
        optim.make_optimizer(config, total_steps=50)


def test_clipping_keeps_small_gradients_and_optax_state_layout():
    """SPEC 6.2 (tf.clip_by_global_norm): a gradient with global norm under clip_norm is left as
    it is; the optimizer state keeps the layout optax's clipping gave it, so train states
    saved before optim.clip_by_global_norm replaced optax.clip_by_global_norm still restore."""
    params, shapes = make_tree(6)
    grads = make_grads(np.random.default_rng(7), shapes)
    jax_params = nest({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    small = nest({k: jnp.asarray(1e-3 * v, jnp.float32) for k, v in grads.items()})
    clip = optim.clip_by_global_norm(1.0)
    clipped, _ = clip.update(small, clip.init(jax_params))
    jax.tree.map(np.testing.assert_array_equal, clipped, small)

    optimizer, schedule = optim.make_optimizer(optim_config(), total_steps=50)
    before = optax.chain(optax.clip_by_global_norm(1.0),
                         optim.lamb(schedule, WEIGHT_DECAY, BETA_1, BETA_2, EPSILON))
    assert (jax.tree.structure(optimizer.init(jax_params))
            == jax.tree.structure(before.init(jax_params)))
