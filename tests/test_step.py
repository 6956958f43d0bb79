"""The train/eval step with the pretraining task: SPEC 5 losses against NumPy, and exact
gradient accumulation."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

from albert_jax import pretraining
from albert_jax.model import get_config
from albert_jax.train import optim
from albert_jax.train import step as step_lib
from albert_jax.train.state import TrainState
from configs import pretrain as pretrain_config


def pretraining_task(seq_len: int = 16, max_predictions: int = 4) -> pretraining.PretrainingTask:
    """The pretraining task of the tiny model, for steps on `synthetic_batch`es."""
    config = pretrain_config.get_config("model=tiny")
    config.seq_len, config.data.max_predictions = seq_len, max_predictions
    return pretraining.PretrainingTask(config, get_config("tiny"))


def synthetic_batch(rng: np.random.Generator, batch: int, seq: int, predictions: int,
                    vocab: int) -> dict[str, np.ndarray]:
    """A batch shaped like the SPEC 1.5 features, with padding and padded predictions."""
    lengths = rng.integers(seq // 2, seq + 1, size=batch)
    input_mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    input_ids = rng.integers(5, vocab, size=(batch, seq)).astype(np.int32) * input_mask
    segment_ids = ((np.arange(seq)[None, :] >= lengths[:, None] // 2) * input_mask).astype(np.int32)
    real_predictions = rng.integers(1, predictions + 1, size=batch)
    weights = (np.arange(predictions)[None, :] < real_predictions[:, None]).astype(np.float32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, length), predictions, replace=False))
                          for length in lengths]).astype(np.int32) * weights.astype(np.int32)
    masked_ids = rng.integers(5, vocab, size=(batch, predictions)).astype(np.int32) * weights.astype(np.int32)
    return {
        "input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
        "masked_lm_positions": positions, "masked_lm_ids": masked_ids,
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, size=(batch, 1)).astype(np.int32),
    }


def numpy_log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_losses_and_accuracies_match_numpy_port_of_spec_5():
    rng = np.random.default_rng(0)
    batch = synthetic_batch(rng, 6, 16, 5, 50)
    mlm_logits = rng.normal(size=(6, 5, 50)).astype(np.float32)
    sop_logits = rng.normal(size=(6, 2)).astype(np.float32)

    metrics = pretraining.metrics_from_sums(
        pretraining.loss_sums(jnp.asarray(mlm_logits), jnp.asarray(sop_logits), batch), "sop")

    weights = batch["masked_lm_weights"]
    nll = -np.take_along_axis(numpy_log_softmax(mlm_logits), batch["masked_lm_ids"][..., None], -1)[..., 0]
    expected_mlm = (weights * nll).sum() / (weights.sum() + 1e-5)  # SPEC 5.3
    labels = batch["next_sentence_labels"][:, 0]
    expected_sop = -numpy_log_softmax(sop_logits)[np.arange(6), labels].mean()  # SPEC 5.4
    expected_mlm_accuracy = (weights * (mlm_logits.argmax(-1) == batch["masked_lm_ids"])).sum() / (
        weights.sum() + 1e-5)
    np.testing.assert_allclose(metrics["masked_lm_loss"], expected_mlm, rtol=1e-6)
    np.testing.assert_allclose(metrics["sentence_order_loss"], expected_sop, rtol=1e-6)
    np.testing.assert_allclose(metrics["loss"], expected_mlm + expected_sop, rtol=1e-6)  # SPEC 5.5
    np.testing.assert_allclose(metrics["masked_lm_accuracy"], expected_mlm_accuracy, rtol=1e-6)
    np.testing.assert_allclose(metrics["sentence_order_accuracy"],
                               (sop_logits.argmax(-1) == labels).mean(), rtol=1e-6)
    # The "none" ablation trains on the masked-LM loss alone.
    none = pretraining.metrics_from_sums(
        pretraining.loss_sums(jnp.asarray(mlm_logits), jnp.asarray(sop_logits), batch), "none")
    np.testing.assert_allclose(none["loss"], expected_mlm, rtol=1e-6)


def test_padded_predictions_contribute_nothing():
    rng = np.random.default_rng(1)
    batch = synthetic_batch(rng, 4, 16, 6, 40)
    mlm_logits = rng.normal(size=(4, 6, 40)).astype(np.float32)
    sop_logits = rng.normal(size=(4, 2)).astype(np.float32)
    changed = dict(batch, masked_lm_ids=np.where(batch["masked_lm_weights"] > 0,
                                                 batch["masked_lm_ids"], 7))
    before = pretraining.metrics_from_sums(pretraining.loss_sums(mlm_logits, sop_logits, batch), "sop")
    after = pretraining.metrics_from_sums(pretraining.loss_sums(mlm_logits, sop_logits, changed), "sop")
    for key in before:
        np.testing.assert_allclose(before[key], after[key], rtol=1e-7)


def _state_and_step(num_microbatches: int, optimizer: optax.GradientTransformation):
    task = pretraining_task()
    params = nn.unbox(task.model.init(jax.random.PRNGKey(0), *task.init_inputs())["params"])
    state = TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params))
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lambda step: 1e-3,
                                                  num_microbatches=num_microbatches))
    return state, train_step


@pytest.mark.parametrize("optimizer_name", ["sgd", "lamb"])
def test_four_microbatches_of_8_equal_one_batch_of_32(optimizer_name):
    optimizer = (optax.sgd(0.1) if optimizer_name == "sgd"
                 else optax.chain(optax.clip_by_global_norm(1.0), optim.lamb(1e-3)))
    batch = synthetic_batch(np.random.default_rng(2), 32, 16, 4, 128)
    state_one, step_one = _state_and_step(1, optimizer)
    state_four, step_four = _state_and_step(4, optimizer)
    rng = jax.random.PRNGKey(3)
    for _ in range(2):
        state_one, metrics_one = step_one(state_one, batch, rng)
        state_four, metrics_four = step_four(state_four, batch, rng)
        for key in ("loss", "masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
                    "sentence_order_accuracy", "grad_norm"):
            np.testing.assert_allclose(metrics_four[key], metrics_one[key], rtol=1e-5, atol=1e-6)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
        state_four.params, state_one.params)
    assert int(state_four.step) == 2


def test_step_lowers_the_loss_on_a_repeated_batch():
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optim.lamb(5e-3))
    batch = synthetic_batch(np.random.default_rng(4), 8, 16, 4, 128)
    state, train_step = _state_and_step(1, optimizer)
    losses = []
    for _ in range(8):
        state, metrics = train_step(state, batch, jax.random.PRNGKey(0))
        losses.append(float(metrics["loss"]))
    assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] - 0.2, losses


def test_eval_step_sums_add_up_over_batches():
    task = pretraining_task()
    batch = synthetic_batch(np.random.default_rng(5), 8, 16, 4, 128)
    params = nn.unbox(task.model.init(jax.random.PRNGKey(0), *task.init_inputs())["params"])
    eval_step = jax.jit(step_lib.make_eval_step(task))
    whole = pretraining.metrics_from_sums(eval_step(params, batch)[0], "sop")
    halves = [eval_step(params, {k: v[i:i + 4] for k, v in batch.items()})[0] for i in (0, 4)]
    summed = pretraining.metrics_from_sums(jax.tree_util.tree_map(jnp.add, *halves), "sop")
    for key in whole:
        np.testing.assert_allclose(summed[key], whole[key], rtol=1e-5)
