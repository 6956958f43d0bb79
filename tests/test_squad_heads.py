"""SQuAD heads and losses against a float64 NumPy transcription of SPEC 8.3 (reference
`create_v1_model` / `create_v2_model` / the model_fn losses), on random weights."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from albert_jax.model import AlbertModel, get_config, heads
from albert_jax.model.albert import AlbertForQuestionAnswering, AlbertForQuestionAnsweringV2

BATCH, SEQ = 3, 12
START_N_TOP, END_N_TOP = 5, 5


@pytest.fixture(scope="module")
def config():
    return get_config("tiny")


def _random_params(variables, seed: int):
    """Init values plus noise, so that biases and LayerNorm parameters are not 0 and 1."""
    params = nn.unbox(variables["params"])
    leaves, treedef = jax.tree.flatten(params)
    rng = np.random.default_rng(seed)
    return jax.tree.unflatten(treedef, [np.asarray(leaf) + rng.normal(0, 0.3, leaf.shape)
                                        .astype(np.float32) for leaf in leaves])


def _inputs(hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    sequence_output = rng.normal(size=(BATCH, SEQ, hidden)).astype(np.float32)
    # [CLS] q q [SEP] context... [SEP] pad, as build_features makes them.
    p_mask = np.ones((BATCH, SEQ), dtype=np.int32)
    p_mask[:, 0] = 0
    p_mask[:, 4:SEQ - 2] = 0
    p_mask[1, 8:] = 1  # a shorter window: 4 context tokens, fewer than start_n_top + 1 slots
    return sequence_output, p_mask


# ----------------------------------------------------------------------------------------------
# NumPy transcription (float64)
# ----------------------------------------------------------------------------------------------

def _f64(tree):
    return jax.tree.map(lambda leaf: np.asarray(leaf, dtype=np.float64), tree)


def _log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _layer_norm(x, scale, bias, eps=1e-12):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * scale + bias


def _np_start_logits(params, hidden, p_mask):
    logits = hidden @ params["start_logits"]["dense"]["kernel"][:, 0] \
        + params["start_logits"]["dense"]["bias"][0]
    return logits * (1 - p_mask) - 1e30 * p_mask


def _np_end_log_probs(params, hidden, p_mask, start_feature):
    """One example: hidden [S, H], start_feature [H] -> end log-probs [S] (masked)."""
    end = params["end_logits"]
    concat = np.concatenate([hidden, np.tile(start_feature, (len(hidden), 1))], axis=-1)
    x = np.tanh(concat @ end["dense_0"]["kernel"] + end["dense_0"]["bias"])
    x = _layer_norm(x, end["LayerNorm"]["scale"], end["LayerNorm"]["bias"])
    logits = x @ end["dense_1"]["kernel"][:, 0] + end["dense_1"]["bias"][0]
    return _log_softmax(logits * (1 - p_mask) - 1e30 * p_mask)


def _np_cls_logits(params, hidden, start_logits):
    """One example: sum_j softmax(start)_j h_j and h_CLS -> the answerability logit."""
    answer = params["answer_class"]
    start_probs = np.exp(_log_softmax(start_logits))
    concat = np.concatenate([start_probs @ hidden, hidden[0]])
    x = np.tanh(concat @ answer["dense_0"]["kernel"] + answer["dense_0"]["bias"])
    return x @ answer["dense_1"]["kernel"][:, 0]


def np_v2_head(params, sequence_output, p_mask, start_positions=None):
    params, sequence_output, p_mask = _f64(params), _f64(sequence_output), _f64(p_mask)
    outputs = {key: [] for key in ("start_log_probs", "end_log_probs", "start_top_log_probs",
                                   "start_top_index", "end_top_log_probs", "end_top_index",
                                   "cls_logits")}
    for b in range(len(sequence_output)):
        hidden, mask = sequence_output[b], p_mask[b]
        start_logits = _np_start_logits(params, hidden, mask)
        start_log_probs = _log_softmax(start_logits)
        if start_positions is not None:
            outputs["start_log_probs"].append(start_log_probs)
            outputs["end_log_probs"].append(
                _np_end_log_probs(params, hidden, mask, hidden[start_positions[b]]))
        else:
            top_starts = np.argsort(-start_log_probs, kind="stable")[:START_N_TOP]
            outputs["start_top_index"].append(top_starts)
            outputs["start_top_log_probs"].append(start_log_probs[top_starts])
            end_indices, end_log_probs = [], []
            for start in top_starts:  # the beam: for each start its END_N_TOP best ends
                log_probs = _np_end_log_probs(params, hidden, mask, hidden[start])
                top_ends = np.argsort(-log_probs, kind="stable")[:END_N_TOP]
                end_indices.extend(top_ends)
                end_log_probs.extend(log_probs[top_ends])
            outputs["end_top_index"].append(end_indices)
            outputs["end_top_log_probs"].append(end_log_probs)
        outputs["cls_logits"].append(_np_cls_logits(params, hidden, start_logits))
    return {key: np.array(value) for key, value in outputs.items() if value}


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v2_head_and_params(config):
    head = heads.SquadV2Head(config)
    sequence_output, p_mask = _inputs(config.hidden_size)
    variables = head.init(jax.random.key(0), sequence_output, p_mask)
    return head, _random_params(variables, seed=1)


def test_v2_head_training_path_matches_numpy(config, v2_head_and_params):
    head, params = v2_head_and_params
    sequence_output, p_mask = _inputs(config.hidden_size, seed=2)
    start_positions = np.array([5, 0, 7])  # a context token, [CLS] (no answer), another
    outputs = head.apply({"params": params}, sequence_output, p_mask, start_positions)
    expected = np_v2_head(params, sequence_output, p_mask, start_positions)
    assert set(outputs) == {"start_log_probs", "end_log_probs", "cls_logits"}
    for key in outputs:
        np.testing.assert_allclose(outputs[key], expected[key], rtol=2e-5, atol=2e-5)
    # Masked positions get log-prob about -1e30: never a start or an end.
    assert (np.asarray(outputs["start_log_probs"])[p_mask == 1] < -1e29).all()
    assert (np.asarray(outputs["end_log_probs"])[p_mask == 1] < -1e29).all()


def test_v2_head_beam_matches_numpy(config, v2_head_and_params):
    head, params = v2_head_and_params
    sequence_output, p_mask = _inputs(config.hidden_size, seed=3)
    outputs = jax.jit(head.apply)({"params": params}, sequence_output, p_mask)
    expected = np_v2_head(params, sequence_output, p_mask)
    assert {key: outputs[key].shape for key in outputs} == {
        "start_top_log_probs": (BATCH, 5), "start_top_index": (BATCH, 5),
        "end_top_log_probs": (BATCH, 25), "end_top_index": (BATCH, 25), "cls_logits": (BATCH,)}
    assert outputs["start_top_index"].dtype == outputs["end_top_index"].dtype == jnp.int32
    # Example 1 has only 5 unmasked positions ([CLS] and 4 context tokens): the 5 starts are
    # exactly those, and its ends never fall on a masked position either.
    assert sorted(np.asarray(outputs["start_top_index"][1]).tolist()) == [0, 4, 5, 6, 7]
    np.testing.assert_array_equal(outputs["start_top_index"], expected["start_top_index"])
    np.testing.assert_array_equal(outputs["end_top_index"], expected["end_top_index"])
    for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits"):
        np.testing.assert_allclose(outputs[key], expected[key], rtol=2e-5, atol=2e-5)
    assert not np.take_along_axis(p_mask, np.asarray(outputs["end_top_index"]), axis=1).any()


def test_v2_answer_class_dropout(config, v2_head_and_params):
    """Dropout 0.1 on the answerability layer only, and only when not deterministic."""
    head, params = v2_head_and_params
    sequence_output, p_mask = _inputs(config.hidden_size, seed=4)
    start_positions = np.array([4, 0, 6])
    deterministic = head.apply({"params": params}, sequence_output, p_mask, start_positions)
    dropped = head.apply({"params": params}, sequence_output, p_mask, start_positions,
                         deterministic=False, rngs={"dropout": jax.random.key(7)})
    for key in ("start_log_probs", "end_log_probs"):
        np.testing.assert_array_equal(dropped[key], deterministic[key])
    assert not np.allclose(dropped["cls_logits"], deterministic["cls_logits"])
    no_dropout = heads.SquadV2Head(config, dropout_rate=0.0).apply(
        {"params": params}, sequence_output, p_mask, start_positions, deterministic=False)
    np.testing.assert_array_equal(no_dropout["cls_logits"], deterministic["cls_logits"])


def test_v2_loss_matches_numpy(config, v2_head_and_params):
    head, params = v2_head_and_params
    sequence_output, p_mask = _inputs(config.hidden_size, seed=5)
    start_positions, end_positions = np.array([5, 0, 4]), np.array([7, 0, 4])
    is_impossible = np.array([0, 1, 0])
    outputs = head.apply({"params": params}, sequence_output, p_mask, start_positions)
    loss = heads.squad_v2_loss(outputs, start_positions, end_positions, is_impossible)
    expected = np_v2_head(params, sequence_output, p_mask, start_positions)
    rows = np.arange(BATCH)
    logits = expected["cls_logits"]
    # -[z log sigmoid(x) + (1 - z) log(1 - sigmoid(x))], written with logaddexp.
    class_loss = is_impossible * np.logaddexp(0, -logits) + (1 - is_impossible) * np.logaddexp(
        0, logits)
    expected_loss = (0.5 * (-expected["start_log_probs"][rows, start_positions]
                            - expected["end_log_probs"][rows, end_positions]) + 0.5 * class_loss)
    assert loss.shape == (BATCH,)
    np.testing.assert_allclose(loss, expected_loss, rtol=2e-5)


def test_v1_head_and_loss_match_numpy(config):
    head = heads.SquadV1Head(config)
    sequence_output, _ = _inputs(config.hidden_size, seed=6)
    params = _random_params(head.init(jax.random.key(0), sequence_output), seed=7)
    start_logits, end_logits = head.apply({"params": params}, sequence_output)
    weights, bias = np.float64(params["output_weights"]), np.float64(params["output_bias"])
    logits = np.float64(sequence_output) @ weights.T + bias  # cls/squad: [2, H], transpose_b
    np.testing.assert_allclose(start_logits, logits[..., 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(end_logits, logits[..., 1], rtol=1e-5, atol=1e-5)
    start_positions, end_positions = np.array([4, 5, 9]), np.array([6, 5, 11])
    loss = heads.squad_v1_loss(start_logits, end_logits, start_positions, end_positions)
    rows = np.arange(BATCH)
    expected = -0.5 * (_log_softmax(logits[..., 0])[rows, start_positions]
                       + _log_softmax(logits[..., 1])[rows, end_positions])
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def _param_shapes(variables) -> dict[str, tuple[int, ...]]:
    return {"/".join(str(key.key) for key in path): tuple(leaf.shape) for path, leaf in
            jax.tree_util.tree_flatten_with_path(nn.unbox(variables["params"]))[0]}


def test_models_parameter_names_and_composition(config):
    """The SPEC 4.3 variables under "squad" beside the backbone under "albert", and the model is
    exactly the head on the backbone's sequence output."""
    hidden = config.hidden_size
    rng = np.random.default_rng(8)
    input_ids = rng.integers(5, config.vocab_size, size=(BATCH, SEQ)).astype(np.int32)
    token_type_ids = (np.arange(SEQ) >= 4).astype(np.int32)[None].repeat(BATCH, axis=0)
    attention_mask = np.ones((BATCH, SEQ), dtype=np.int32)
    attention_mask[1, 8:] = 0
    _, p_mask = _inputs(hidden)

    v1 = AlbertForQuestionAnswering(config)
    v1_shapes = _param_shapes(jax.eval_shape(v1.init, jax.random.key(0), input_ids,
                                             token_type_ids, attention_mask))
    assert {path: shape for path, shape in v1_shapes.items() if path.startswith("squad/")} == {
        "squad/output_weights": (2, hidden), "squad/output_bias": (2,)}

    v2 = AlbertForQuestionAnsweringV2(config)
    v2_variables = jax.jit(v2.init)(jax.random.key(0), input_ids, token_type_ids,
                                    attention_mask, p_mask)
    v2_shapes = _param_shapes(v2_variables)
    assert {path: shape for path, shape in v2_shapes.items() if path.startswith("squad/")} == {
        "squad/start_logits/dense/kernel": (hidden, 1),
        "squad/start_logits/dense/bias": (1,),
        "squad/end_logits/dense_0/kernel": (2 * hidden, hidden),
        "squad/end_logits/dense_0/bias": (hidden,),
        "squad/end_logits/LayerNorm/scale": (hidden,),
        "squad/end_logits/LayerNorm/bias": (hidden,),
        "squad/end_logits/dense_1/kernel": (hidden, 1),
        "squad/end_logits/dense_1/bias": (1,),
        "squad/answer_class/dense_0/kernel": (2 * hidden, hidden),
        "squad/answer_class/dense_0/bias": (hidden,),
        "squad/answer_class/dense_1/kernel": (hidden, 1),  # no bias (SPEC 4.3)
    }
    backbone_shapes = _param_shapes(jax.eval_shape(AlbertModel(config).init, jax.random.key(0),
                                                   input_ids, token_type_ids, attention_mask))
    for shapes in (v1_shapes, v2_shapes):
        assert {path[len("albert/"):]: shape for path, shape in shapes.items()
                if path.startswith("albert/")} == backbone_shapes

    params = _random_params(v2_variables, seed=9)
    sequence_output, _ = jax.jit(AlbertModel(config).apply)(
        {"params": params["albert"]}, input_ids, token_type_ids, attention_mask)
    for start_positions in (None, np.array([4, 0, 5])):
        outputs = jax.jit(v2.apply)({"params": params}, input_ids, token_type_ids,
                                    attention_mask, p_mask, start_positions)
        expected = np_v2_head(params["squad"], sequence_output, p_mask, start_positions)
        for key in outputs:
            np.testing.assert_allclose(outputs[key], expected[key], rtol=1e-4, atol=1e-4)
