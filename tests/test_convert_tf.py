"""Reference ALBERT TF1 checkpoints without TensorFlow: weights that give the logits of a NumPy
port of SPEC 3.2 run on the TF variables themselves (the bundle format: test_tf_bundle.py)."""
import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from albert_jax.convert import load_tf_checkpoint, save_tf_checkpoint
from albert_jax.errors import ConfigError
from albert_jax.model import AlbertForPreTraining, example_inputs
from albert_jax.pretraining import init_inputs as pretraining_init_inputs

# --------------------------------------------------------------------------------------------
# ALBERT variables by the SPEC 4.1 / 4.2 tables, and SPEC 3.2 in NumPy.

TINY = dict(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2,
            num_hidden_groups=1, inner_group_num=1, num_attention_heads=3, intermediate_size=20,
            hidden_act="gelu", max_position_embeddings=16, type_vocab_size=2,
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, initializer_range=0.02,
            # SPEC 3.1: keys in the released json that the model never reads.
            down_scale_factor=1, net_structure_type=0, gap_size=0, num_memory_blocks=0)
VARIANTS = {
    "tiny": {},
    "groups_and_inner_groups": dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
    "embedding_equals_hidden": dict(embedding_size=12),
}


def _reference_variables(fields: dict, heads: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights under the reference names and shapes (SPEC 4.1, 4.2)."""
    rng = np.random.default_rng(seed)
    V, E, H, I = (fields[k] for k in ("vocab_size", "embedding_size", "hidden_size",  # noqa: E741  (SPEC's V, E, H, I)
                                      "intermediate_size"))
    shapes = {"bert/embeddings/word_embeddings": (V, E),
              "bert/embeddings/token_type_embeddings": (fields["type_vocab_size"], E),
              "bert/embeddings/position_embeddings": (fields["max_position_embeddings"], E),
              "bert/embeddings/LayerNorm/gamma": (E,), "bert/embeddings/LayerNorm/beta": (E,),
              "bert/pooler/dense/kernel": (H, H), "bert/pooler/dense/bias": (H,)}
    if E != H:
        shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = (E, H)
        shapes["bert/encoder/embedding_hidden_mapping_in/bias"] = (H,)
    for g in range(fields["num_hidden_groups"]):
        for i in range(fields["inner_group_num"]):
            scope = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            for name in ("attention_1/self/query", "attention_1/self/key", "attention_1/self/value",
                         "attention_1/output/dense"):
                shapes[scope + name + "/kernel"], shapes[scope + name + "/bias"] = (H, H), (H,)
            shapes[scope + "ffn_1/intermediate/dense/kernel"] = (H, I)
            shapes[scope + "ffn_1/intermediate/dense/bias"] = (I,)
            shapes[scope + "ffn_1/intermediate/output/dense/kernel"] = (I, H)
            shapes[scope + "ffn_1/intermediate/output/dense/bias"] = (H,)
            for norm in ("LayerNorm", "LayerNorm_1"):
                shapes[f"{scope}{norm}/gamma"] = shapes[f"{scope}{norm}/beta"] = (H,)
    if heads:
        shapes.update({"cls/predictions/transform/dense/kernel": (H, E),
                       "cls/predictions/transform/dense/bias": (E,),
                       "cls/predictions/transform/LayerNorm/gamma": (E,),
                       "cls/predictions/transform/LayerNorm/beta": (E,),
                       "cls/predictions/output_bias": (V,),
                       "cls/seq_relationship/output_weights": (2, H),
                       "cls/seq_relationship/output_bias": (2,)})
    return {name: ((name.endswith("gamma")) + 0.3 * rng.standard_normal(shape)).astype(np.float32)
            for name, shape in shapes.items()}


def _with_optimizer_state(variables: dict) -> dict:
    """What run_pretraining.py saves besides the weights: LAMB slots and the step (SPEC 4.4)."""
    state = {"global_step": np.array(125000, np.int64)}
    for name, value in variables.items():
        state[name + "/adam_m"] = np.full_like(value, 7.0)
        state[name + "/adam_v"] = np.full_like(value, 9.0)
    return {**variables, **state}


def _layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-12) * gamma + beta


def _gelu(x):  # SPEC 3.2.8: the reference "gelu" is the tanh form
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _reference_logits(v: dict, fields: dict, input_ids, token_type_ids, attention_mask,
                      masked_lm_positions):
    """SPEC 3.2 step by step in float64 on the TF variables; (mlm [B,P,V], sop [B,2])."""
    v = {name: value.astype(np.float64) for name, value in v.items()}
    batch, seq = input_ids.shape
    H, N, L, G = (fields[k] for k in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                      "num_hidden_groups"))
    x = (v["bert/embeddings/word_embeddings"][input_ids]
         + v["bert/embeddings/token_type_embeddings"][token_type_ids]
         + v["bert/embeddings/position_embeddings"][:seq])
    x = _layer_norm(x, v["bert/embeddings/LayerNorm/gamma"], v["bert/embeddings/LayerNorm/beta"])
    if "bert/encoder/embedding_hidden_mapping_in/kernel" in v:
        x = x @ v["bert/encoder/embedding_hidden_mapping_in/kernel"] \
            + v["bert/encoder/embedding_hidden_mapping_in/bias"]
    adder = (1.0 - attention_mask[:, None, None, :]) * -10000.0
    for layer in range(L):
        for inner in range(fields["inner_group_num"]):
            p = f"bert/encoder/transformer/group_{int(layer / L * G)}/inner_group_{inner}/"
            def dense(h, name):
                return h @ v[p + name + "/kernel"] + v[p + name + "/bias"]

            def heads(h):
                return h.reshape(batch, seq, N, H // N).transpose(0, 2, 1, 3)

            q, k, val = (heads(dense(x, f"attention_1/self/{n}")) for n in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(H // N) + adder
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            context = (probs @ val).transpose(0, 2, 1, 3).reshape(batch, seq, H)
            a = _layer_norm(dense(context, "attention_1/output/dense") + x,
                            v[p + "LayerNorm/gamma"], v[p + "LayerNorm/beta"])
            f = dense(_gelu(dense(a, "ffn_1/intermediate/dense")), "ffn_1/intermediate/output/dense")
            x = _layer_norm(f + a, v[p + "LayerNorm_1/gamma"], v[p + "LayerNorm_1/beta"])
    pooled = np.tanh(x[:, 0] @ v["bert/pooler/dense/kernel"] + v["bert/pooler/dense/bias"])
    h = np.take_along_axis(x, masked_lm_positions[:, :, None], axis=1)
    h = _gelu(h @ v["cls/predictions/transform/dense/kernel"] + v["cls/predictions/transform/dense/bias"])
    h = _layer_norm(h, v["cls/predictions/transform/LayerNorm/gamma"],
                    v["cls/predictions/transform/LayerNorm/beta"])
    mlm = h @ v["bert/embeddings/word_embeddings"].T + v["cls/predictions/output_bias"]
    sop = pooled @ v["cls/seq_relationship/output_weights"].T + v["cls/seq_relationship/output_bias"]
    return mlm, sop


def _write(tmp_path, fields: dict, variables: dict, prefix: str = "model.ckpt-125000") -> tuple[str, str]:
    config_path = str(tmp_path / "albert_config.json")
    with open(config_path, "w") as config_file:
        json.dump(fields, config_file)
    save_tf_checkpoint(variables, str(tmp_path / prefix))
    return str(tmp_path / prefix), config_path


def _expected_tree(config):
    return jax.eval_shape(lambda: nn.unbox(AlbertForPreTraining(config).init(
        jax.random.PRNGKey(0), *pretraining_init_inputs(4, 2))["params"]))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_checkpoint_gives_reference_logits(name, tmp_path):
    fields = {**TINY, **VARIANTS[name]}
    variables = _reference_variables(fields)
    prefix, config_path = _write(tmp_path, fields, _with_optimizer_state(variables))
    config, params = load_tf_checkpoint(prefix, config_path)
    assert config.hidden_act == "gelu_tanh" and config.layer_norm_eps == 1e-12
    expected = _expected_tree(config)
    assert jax.tree.structure(params) == jax.tree.structure(expected)
    for actual, wanted in zip(jax.tree.leaves(params), jax.tree.leaves(expected)):
        assert actual.shape == wanted.shape and actual.dtype == wanted.dtype

    rng = np.random.default_rng(1)
    input_ids = rng.integers(0, fields["vocab_size"], (3, 9)).astype(np.int32)
    token_type_ids = (np.arange(9) >= 4).astype(np.int32)[None].repeat(3, 0)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[2, 3:] = 0
    positions = np.array([[1, 5, 8], [0, 2, 4], [2, 1, 0]], np.int32)
    mlm, sop = jax.jit(AlbertForPreTraining(config).apply)(
        {"params": params}, input_ids, token_type_ids, attention_mask, positions)
    reference_mlm, reference_sop = _reference_logits(variables, fields, input_ids, token_type_ids,
                                                     attention_mask, positions)
    assert np.abs(reference_mlm).max() > 1 and np.abs(reference_sop).max() > 0.1
    np.testing.assert_allclose(mlm, reference_mlm, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sop, reference_sop, rtol=0, atol=1e-5)


def test_tf_hub_export_and_checkpoint_directories(tmp_path):
    variables = _reference_variables(TINY)
    os.makedirs(tmp_path / "ckpt")
    prefix, config_path = _write(tmp_path / "ckpt", TINY, variables)
    _, params = load_tf_checkpoint(prefix, config_path)
    # A TF1 training directory: the `checkpoint` state file names the latest prefix.
    with open(tmp_path / "ckpt" / "checkpoint", "w") as state:
        state.write('model_checkpoint_path: "model.ckpt-125000"\n'
                    'all_model_checkpoint_paths: "model.ckpt-125000"\n')
    _, from_directory = load_tf_checkpoint(str(tmp_path / "ckpt"), config_path)
    # TF-Hub: `module/` names under variables/variables (SPEC 4.4), no optimizer slots.
    hub = {f"module/{name}": value for name, value in variables.items()}
    save_tf_checkpoint(hub, str(tmp_path / "hub" / "variables" / "variables"))
    _, from_hub = load_tf_checkpoint(str(tmp_path / "hub"), config_path)
    _, from_index = load_tf_checkpoint(prefix + ".index", config_path)
    for other in (from_directory, from_hub, from_index):
        jax.tree.map(np.testing.assert_array_equal, other, params)
    np.testing.assert_array_equal(params["seq_relationship"]["dense"]["kernel"],
                                  variables["cls/seq_relationship/output_weights"].T)


def test_backbone_only_checkpoint(tmp_path):
    prefix, config_path = _write(tmp_path, TINY, _reference_variables(TINY, heads=False))
    _, params = load_tf_checkpoint(prefix, config_path)
    assert set(params) == {"albert"}


def test_errors_list_missing_unknown_and_misshapen_variables(tmp_path):
    variables = _reference_variables(TINY)
    del variables["bert/pooler/dense/bias"]
    variables["bert/encoder/extra/kernel"] = np.zeros(3, np.float32)
    variables["cls/predictions/transform/dense/kernel"] = np.zeros((12, 9), np.float32)
    prefix, config_path = _write(tmp_path, TINY, variables)
    with pytest.raises(ValueError) as error:
        load_tf_checkpoint(prefix, config_path)
    message = str(error.value)
    assert "missing variables ['bert/pooler/dense/bias']" in message
    assert "unknown variables ['bert/encoder/extra/kernel']" in message
    assert "cls/predictions/transform/dense/kernel has shape (12, 9), the config needs (12, 8)" in message


def _head_tree(model: nn.Module, *inputs) -> dict:
    """The shapes of a task model's params, as the loader must fill them."""
    abstract = jax.eval_shape(lambda: nn.unbox(model.init(jax.random.PRNGKey(0), *inputs)))
    return jax.tree.map(lambda leaf: leaf.shape, abstract["params"])


def test_fine_tuned_heads_load_under_our_task_models_names(tmp_path):
    """SPEC 4.3: run_classifier's top-level output_weights/output_bias (GLUE, RACE), SQuAD v1's
    cls/squad/* and v2's start_logits/end_logits/answer_class scopes."""
    from albert_jax.convert.tf_checkpoint import model_config_from_albert_json
    from albert_jax.model import (
        AlbertForQuestionAnswering,
        AlbertForQuestionAnsweringV2,
        AlbertForSequenceClassification,
    )
    config = model_config_from_albert_json(TINY)
    inputs = example_inputs((1, 8))  # longer than v2's top-5 beam
    rng = np.random.default_rng(3)
    H = TINY["hidden_size"]
    cases = {
        "glue": ({"output_weights": (3, H), "output_bias": (3,)},
                 AlbertForSequenceClassification(config, num_labels=3), inputs),
        "squad_v1": ({"cls/squad/output_weights": (2, H), "cls/squad/output_bias": (2,)},
                     AlbertForQuestionAnswering(config), inputs),
        "squad_v2": ({"start_logits/dense/kernel": (H, 1), "start_logits/dense/bias": (1,),
                      "end_logits/dense_0/kernel": (2 * H, H), "end_logits/dense_0/bias": (H,),
                      "end_logits/LayerNorm/gamma": (H,), "end_logits/LayerNorm/beta": (H,),
                      "end_logits/dense_1/kernel": (H, 1), "end_logits/dense_1/bias": (1,),
                      "answer_class/dense_0/kernel": (2 * H, H),
                      "answer_class/dense_0/bias": (H,), "answer_class/dense_1/kernel": (H, 1)},
                     AlbertForQuestionAnsweringV2(config), (*inputs, inputs[0])),
    }
    for name, (head, model, inputs) in cases.items():
        variables = _reference_variables(TINY, heads=False)
        variables.update({key: rng.standard_normal(shape).astype(np.float32)
                          for key, shape in head.items()})
        variables["output_weights/adam_m"] = np.zeros((3, H), np.float32)  # skipped (SPEC 4.4)
        (tmp_path / name).mkdir()
        prefix, config_path = _write(tmp_path / name, TINY, variables)
        _, params = load_tf_checkpoint(prefix, config_path)
        assert jax.tree.map(np.shape, params) == _head_tree(model, *inputs), name
        if name == "glue":  # [labels, H] in TF, a [H, labels] kernel here
            np.testing.assert_array_equal(params["classifier"]["dense"]["kernel"],
                                          variables["output_weights"].T)
        if name == "squad_v2":
            np.testing.assert_array_equal(params["squad"]["end_logits"]["LayerNorm"]["scale"],
                                          variables["end_logits/LayerNorm/gamma"])
    variables = _reference_variables(TINY, heads=False)
    variables.update(output_weights=np.zeros((3, H), np.float32))
    (tmp_path / "partial").mkdir()
    prefix, config_path = _write(tmp_path / "partial", TINY, variables)
    with pytest.raises(ValueError, match="fine-tuned head: missing variable output_bias"):
        load_tf_checkpoint(prefix, config_path)


def test_a_head_is_all_or_nothing(tmp_path):
    variables = _reference_variables(TINY, heads=False)
    variables["cls/predictions/output_bias"] = np.zeros(40, np.float32)
    prefix, config_path = _write(tmp_path, TINY, variables)
    with pytest.raises(ValueError, match=r"missing variables \['cls/predictions/transform/LayerNorm/beta'"):
        load_tf_checkpoint(prefix, config_path)


def test_config_json_mapping(tmp_path):
    prefix, config_path = _write(tmp_path, TINY, _reference_variables(TINY))
    for bad, match in ((dict(TINY, hidden_act="swish"), "hidden_act='swish'"),
                       ({k: v for k, v in TINY.items() if k != "vocab_size"}, "vocab_size")):
        with open(config_path, "w") as config_file:
            json.dump(bad, config_file)
        with pytest.raises(ConfigError, match=match):
            load_tf_checkpoint(prefix, config_path)
    with open(config_path, "w") as config_file:
        json.dump(TINY, config_file)
    with pytest.raises(FileNotFoundError, match="model.ckpt-best"):
        load_tf_checkpoint(str(tmp_path / "nowhere"), config_path)
