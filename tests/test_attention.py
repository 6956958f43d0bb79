"""The fused attention kernels compute what the xla path computes (model/attention.py).

Splash runs in Pallas interpret mode on CPU; its tiles are 128 wide, so the sequences here are
128 long (the model tiny). The xla path is the reference: it is checked against a NumPy
transcription of SPEC 3.2 in test_model.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from albert_jax import pretraining
from albert_jax.errors import ConfigError
from albert_jax.model import AlbertModel, attention, get_config
from albert_jax.train import optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from configs import pretrain as pretrain_config
from test_step import synthetic_batch

SEQ = 128


def padded_inputs(batch: int, vocab: int) -> dict[str, np.ndarray]:
    """Rows of different lengths (SPEC 3.2.6: padding keys get -10000), one all padding (a
    batch filled up to size: xla's softmax is then uniform over every key)."""
    rng = np.random.default_rng(0)
    lengths = np.array([SEQ, 70, 1, 0, 100, 5, 128, 64])[:batch]
    input_mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    return {"input_ids": rng.integers(5, vocab, size=(batch, SEQ)).astype(np.int32) * input_mask,
            "segment_ids": (np.arange(SEQ)[None, :] >= lengths[:, None] // 2).astype(np.int32),
            "input_mask": input_mask}


def forward_and_gradients(config_fields: dict, mesh_shape: tuple[int, int, int]) -> dict:
    """{"xla": ..., "splash": ...}: (sequence output, pooled output, parameter gradients) of
    AlbertModel under a mesh with each kernel, the activation constraints bound as the train step
    binds them, from one init (the parameter tree does not depend on the kernel: the last test
    of this file)."""
    configs = {impl: get_config("tiny", attention_impl=impl, max_position_embeddings=SEQ,
                                **config_fields) for impl in ("xla", "splash")}
    inputs = padded_inputs(8, configs["xla"].vocab_size)
    params = sharding.unbox(AlbertModel(configs["xla"]).init(jax.random.PRNGKey(0), **inputs))
    data, fsdp, tensor = mesh_shape
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor)),
                              devices=jax.devices()[:data * fsdp * tensor])
    weights = jax.random.normal(jax.random.PRNGKey(1), (8, SEQ, configs["xla"].hidden_size))
    inputs = jax.device_put(inputs, sharding.batch_sharding(mesh))
    params = jax.device_put(params, sharding.replicated(mesh))

    def forward_and_gradients_with(model: AlbertModel):
        def loss(params, inputs):
            sequence, pooled = model.apply(params, **inputs)
            return jnp.sum(sequence.astype(jnp.float32) * weights), (sequence, pooled)

        def step(params, inputs):
            with sharding.activation_sharding(mesh):
                (_, (sequence, pooled)), grads = jax.value_and_grad(loss, has_aux=True)(params,
                                                                                        inputs)
            return sequence, pooled, grads

        return jax.device_get(jax.jit(step)(params, inputs))

    return {impl: forward_and_gradients_with(AlbertModel(config))
            for impl, config in configs.items()}


def assert_trees_close(actual, expected, rtol, what):
    """Leafwise close: relative `rtol`, and absolute `rtol` of the leaf's largest magnitude (a
    bfloat16 gradient of 300 rounds in steps of 2), at least 2e-3: the all-padding row's scores
    sit at -10000, where float32 keeps ~1e-3 of them, so xla itself is that coarse there."""
    def close(a, b):
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=max(2e-3, rtol * np.abs(b).max()),
                                   err_msg=what)
    jax.tree.map(close, actual, expected)


@pytest.mark.parametrize("fields, mesh_shape, tolerance", [
    # Every sharing mode (SPEC 3.3); 4 heads on each of 4 batch devices, 1 head a device
    # (2 heads over tensor=2, or 1 head), 2 heads a device in bfloat16.
    (dict(sharing="all"), (2, 2, 1), 2e-5),
    (dict(sharing="none", num_attention_heads=2), (2, 2, 2), 2e-5),
    (dict(sharing="ffn", num_attention_heads=1), (4, 2, 1), 2e-5),
    (dict(sharing="attention", dtype="bfloat16"), (2, 2, 2), 2e-2),
])
@pytest.mark.slow
def test_splash_equals_xla_forward_and_gradients(fields, mesh_shape, tolerance):
    results = forward_and_gradients(fields, mesh_shape)
    expected, actual = results["xla"], results["splash"]
    assert_trees_close(actual[:2], expected[:2], tolerance, "outputs")
    assert_trees_close(actual[2], expected[2], tolerance, "gradients")


def test_splash_under_shard_map_runs_the_kernel_per_device():
    """The jitted program holds the Pallas call inside the shard_map, not the einsum scores."""
    config = get_config("tiny", attention_impl="splash", max_position_embeddings=SEQ)
    model = AlbertModel(config)
    inputs = padded_inputs(4, config.vocab_size)
    params = sharding.unbox(model.init(jax.random.PRNGKey(0), **inputs))
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=1)),
                              devices=jax.devices()[:4])

    def forward(params, inputs):
        with sharding.activation_sharding(mesh):
            return model.apply(params, **inputs)[0]

    program = str(jax.make_jaxpr(forward)(params, inputs))
    assert "shard_map" in program and "pallas_call" in program
    # No [batch, heads, seq, seq] scores anywhere: the fused kernel never materialises them.
    assert f"[4,4,{SEQ},{SEQ}]" not in program.replace(" ", "")


@pytest.mark.slow
def test_a_sharded_train_step_with_splash_equals_xla():
    """Pretraining steps on a data x fsdp x tensor mesh: same losses and parameters."""
    optim_config = ml_collections.ConfigDict(dict(
        name="lamb", lr=1e-2, warmup_steps=1, schedule="reference", power=1.0,
        weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))
    optimizer, lr_fn = optim.make_optimizer(optim_config, total_steps=10)
    batches = [synthetic_batch(np.random.default_rng(i), 8, SEQ, 4, 128) for i in range(2)]
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=2, fsdp=2, tensor=2)))

    def task_of(impl):
        config = pretrain_config.get_config("model=tiny")
        config.seq_len, config.data.max_predictions = SEQ, 4
        return pretraining.PretrainingTask(
            config, get_config("tiny", attention_impl=impl, max_position_embeddings=SEQ))

    # One initial state for both kernels (the same parameter tree: the last test of this file),
    # kept on the host since each run's step donates the state it is given.
    xla_task = task_of("xla")
    _, shardings = state_lib.abstract_train_state(xla_task.model, optimizer, mesh,
                                                  xla_task.init_inputs())
    initial_state = jax.device_get(state_lib.init_train_state(
        xla_task.model, optimizer, mesh, jax.random.PRNGKey(0), xla_task.init_inputs(),
        shardings))

    def run(impl):
        task = task_of(impl)
        state = jax.device_put(initial_state, shardings)
        batch_sharding = sharding.batch_sharding(mesh)
        train_step = step_lib.jit_train_step(task, optimizer, lr_fn, mesh, shardings)
        losses = []
        for batch in batches:
            state, metrics = train_step(state, jax.device_put(batch, batch_sharding),
                                        jax.random.PRNGKey(1))
            losses.append(float(metrics["loss"]))
        return losses, jax.device_get(state.params)

    xla_losses, xla_params = run("xla")
    splash_losses, splash_params = run("splash")
    np.testing.assert_allclose(splash_losses, xla_losses, rtol=1e-5)
    assert_trees_close(splash_params, xla_params, 1e-4, "parameters after 2 steps")


@pytest.mark.parametrize("platform, fields, expected", [
    ("tpu", {}, "splash"),
    ("gpu", {"dtype": "bfloat16"}, "cudnn"),
    ("gpu", {}, "xla"),  # cuDNN's fused attention has no float32
    ("cpu", {}, "xla"),
    ("tpu", {"attention_probs_dropout_prob": 0.1}, "xla"),  # only xla has attention dropout
    ("gpu", {"attention_impl": "xla", "dtype": "bfloat16"}, "xla"),
    ("cpu", {"attention_impl": "splash"}, "splash"),  # interpret mode
])
def test_auto_picks_the_platforms_fused_kernel_where_it_can_run(platform, fields, expected):
    assert attention.resolve(get_config("tiny", **fields), platform) == expected


def test_the_platform_is_the_meshs_not_the_hosts():
    """A plan on a CPU host traces for TPU devices: the abstract mesh's platform decides."""
    tpu_mesh = jax.sharding.AbstractMesh(
        (2,), ("data",), abstract_device=jax.sharding.AbstractDevice(
            device_kind="TPU v5 lite", num_cores=1, platform="tpu"))
    with jax.sharding.use_abstract_mesh(tpu_mesh):
        assert attention.target_platform() == "tpu"
    assert attention.target_platform() == "cpu"


def test_splash_tiles_divide_the_sequence():
    assert [attention.splash_block(n) for n in (128, 256, 384, 512, 1024)] == [
        128, 256, 384, 512, 512]
    with pytest.raises(ConfigError, match="attention_impl='splash'.*multiple of 128, got 100"):
        attention.splash_block(100)


def test_a_checkpoint_does_not_depend_on_the_kernel(tmp_path):
    """The same parameter tree under every kernel, and a run may resume with another one."""
    from albert_jax import config as config_lib
    from albert_jax.train import loop, workdir

    shapes = {impl: jax.tree.map(lambda leaf: (leaf.shape, leaf.dtype), jax.eval_shape(
        AlbertModel(get_config("tiny", attention_impl=impl, max_position_embeddings=SEQ)).init,
        jax.random.PRNGKey(0),
        *padded_inputs(2, 128).values()))
        for impl in ("xla", "splash", "auto")}
    assert shapes["xla"] == shapes["splash"] == shapes["auto"]
    saved = pretrain_config.get_config("model=tiny")
    saved.model_overrides.attention_impl = "xla"
    (tmp_path / workdir.CONFIG_FILE).write_text(config_lib.to_json(saved))
    resumed = pretrain_config.get_config("model=tiny")
    resumed.model_overrides.attention_impl = "splash"
    loop.check_workdir_config(resumed, tmp_path)  # accepted
    resumed.model_overrides.hidden_size = 64
    with pytest.raises(ValueError, match="model_overrides.hidden_size"):
        loop.check_workdir_config(resumed, tmp_path)
