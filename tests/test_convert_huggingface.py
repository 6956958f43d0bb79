"""HuggingFace interop: our forward pass on converted weights equals transformers' (SPEC 4.5, 11).

Every model here is random (no download): transformers models from an AlbertConfig with
torch.manual_seed, every parameter perturbed so that no bias is zero and no LayerNorm is the
identity (a mapping mistake in any tensor changes the logits).
"""
import json
import os

import flax.linen as nn
import jax
import numpy as np
import pytest
from flax import traverse_util
from safetensors.numpy import load_file, save_file

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from albert_jax.convert import load_huggingface, save_huggingface  # noqa: E402
from albert_jax.convert.huggingface import model_config_from_hf  # noqa: E402
from albert_jax.convert.tf_checkpoint import param_shapes  # noqa: E402
from albert_jax.errors import ConfigError  # noqa: E402
from albert_jax.model import AlbertForPreTraining, AlbertModel, get_config  # noqa: E402
from albert_jax.pretraining import init_inputs as pretraining_init_inputs  # noqa: E402

BASE = dict(vocab_size=64, embedding_size=16, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=48, max_position_embeddings=24,
            hidden_act="gelu_new")
# Non-standard shapes, sharing layouts and each activation (HF "gelu" is the exact erf form,
# "gelu_new" the tanh form, SPEC 3.2.8), all of which must convert exactly.
CONFIGS = {
    "tiny": {},
    "odd_widths_exact_gelu": dict(embedding_size=24, hidden_size=33, num_attention_heads=3,
                                  intermediate_size=40, hidden_act="gelu"),
    "embedding_equals_hidden": dict(embedding_size=32),
    "two_groups_four_layers_relu": dict(num_hidden_layers=4, num_hidden_groups=2,
                                        hidden_act="relu"),
    "two_inner_groups": dict(inner_group_num=2),
}
MAPPING = "albert.encoder.embedding_hidden_mapping_in"


def _perturb(model: "torch.nn.Module", seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "LayerNorm" in name or "layer_norm" in name:
                parameter.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                parameter.copy_(0.15 * noise)


def _hf_model(fields: dict, cls=None, seed: int = 0) -> "torch.nn.Module":
    torch.manual_seed(seed)
    config = transformers.AlbertConfig(**{**BASE, **fields})
    model = (cls or transformers.AlbertForPreTraining)(config).eval()
    _perturb(model, seed)  # E == H included: a random, non-identity embedding mapping
    return model


def _batch(vocab_size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    input_ids = rng.integers(0, vocab_size, (3, 10)).astype(np.int32)
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, 7:] = 0  # padding: keys masked out (SPEC 3.2.6)
    attention_mask[2, 4:] = 0
    masked_lm_positions = np.array([[1, 4, 9], [0, 2, 6], [3, 1, 2]], np.int32)
    return dict(input_ids=input_ids, token_type_ids=token_type_ids,
                attention_mask=attention_mask, masked_lm_positions=masked_lm_positions)


def _hf_logits(model, batch) -> tuple[np.ndarray, np.ndarray]:
    with torch.no_grad():
        output = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                       token_type_ids=torch.tensor(batch["token_type_ids"], dtype=torch.long),
                       attention_mask=torch.tensor(batch["attention_mask"], dtype=torch.long))
    mlm = np.take_along_axis(output.prediction_logits.numpy(),
                             batch["masked_lm_positions"][:, :, None].astype(np.int64), axis=1)
    return mlm, output.sop_logits.numpy()


def _our_logits(apply, params, batch) -> tuple[np.ndarray, np.ndarray]:
    mlm, sop = apply({"params": params}, batch["input_ids"], batch["token_type_ids"],
                     batch["attention_mask"], batch["masked_lm_positions"])
    return np.asarray(mlm), np.asarray(sop)


def _random_params(config, seed: int) -> dict:
    """Our parameter tree (shapes from the model itself), random: no zero bias, no unit scale."""
    rng = np.random.default_rng(seed)
    return traverse_util.unflatten_dict({
        path: ((path[-1] == "scale") + 0.15 * rng.standard_normal(shape)).astype(np.float32)
        for path, shape in param_shapes(config).items()})


def _assert_same_tree(actual, config, part=None) -> None:
    """`actual` has exactly the tree, shapes and dtype of AlbertForPreTraining(config).init."""
    expected = jax.eval_shape(lambda: nn.unbox(AlbertForPreTraining(config).init(
        jax.random.PRNGKey(0), *pretraining_init_inputs(4, 2))["params"]))
    expected = expected[part] if part else expected
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        assert np.shape(a) == e.shape and np.asarray(a).dtype == e.dtype == np.float32


def _saved(model, path) -> str:
    model.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_conversion_is_exact(name, tmp_path):
    model = _hf_model(CONFIGS[name])
    source = _saved(model, tmp_path / "hf")
    config, params = load_huggingface(source)
    assert config.hidden_act == {"gelu": "gelu_exact", "relu": "relu"}.get(
        CONFIGS[name].get("hidden_act"), "gelu_tanh")
    _assert_same_tree(params, config)
    batch = _batch(config.vocab_size)
    apply = jax.jit(AlbertForPreTraining(config).apply)

    # HF -> ours: the same logits, with padding in the batch.
    hf_mlm, hf_sop = _hf_logits(model, batch)
    mlm, sop = _our_logits(apply, params, batch)
    assert np.abs(hf_mlm).max() > 0.5 and np.abs(hf_sop).max() > 0.05  # informative logits
    np.testing.assert_allclose(mlm, hf_mlm, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sop, hf_sop, rtol=0, atol=1e-5)

    # HF -> ours -> HF writes the very tensors HF wrote; reading that back changes nothing.
    save_huggingface(config, params, str(tmp_path / "round_trip"))
    original = load_file(os.path.join(source, "model.safetensors"))
    written = load_file(str(tmp_path / "round_trip" / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for key, tensor in original.items():
        assert written[key].dtype == tensor.dtype and np.array_equal(written[key], tensor), key
    _, params_again = load_huggingface(str(tmp_path / "round_trip"))
    jax.tree.map(np.testing.assert_array_equal, params_again, params)

    # Ours -> HF: transformers loads everything and computes our logits.
    ours = _random_params(config, seed=1)
    save_huggingface(config, ours, str(tmp_path / "export"))
    exported, info = transformers.AlbertForPreTraining.from_pretrained(
        tmp_path / "export", output_loading_info=True)
    assert info == {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": [],
                    "error_msgs": []}
    exported.eval()
    # The tied decoder (SPEC 4.2) is the word embedding table after loading.
    assert torch.equal(exported.predictions.decoder.weight,
                       exported.albert.embeddings.word_embeddings.weight)
    hf_mlm, hf_sop = _hf_logits(exported, batch)
    mlm, sop = _our_logits(apply, ours, batch)
    np.testing.assert_allclose(hf_mlm, mlm, rtol=0, atol=1e-5)
    np.testing.assert_allclose(hf_sop, sop, rtol=0, atol=1e-5)
    # ... and ours -> HF -> ours is bit-identical.
    _, ours_again = load_huggingface(str(tmp_path / "export"))
    jax.tree.map(np.testing.assert_array_equal, ours_again, ours)


def test_activation_names_round_trip(tmp_path):
    # HF "gelu" is exact erf, "gelu_new" the tanh form (SPEC 3.2.8); export writes them back.
    for hf_name in ("gelu", "gelu_new", "relu"):
        config = model_config_from_hf({**BASE, "hidden_act": hf_name})
        save_huggingface(config, _random_params(config, 0), str(tmp_path / hf_name))
        with open(tmp_path / hf_name / "config.json") as config_file:
            assert json.load(config_file)["hidden_act"] == hf_name


def test_pytorch_bin_and_backbone_only_files(tmp_path):
    backbone = _hf_model({}, cls=transformers.AlbertModel)
    backbone.save_pretrained(tmp_path / "bin", safe_serialization=False)
    assert os.path.exists(tmp_path / "bin" / "pytorch_model.bin")
    config, params = load_huggingface(str(tmp_path / "bin"))
    assert set(params) == {"albert"}  # heads are never invented
    _assert_same_tree(params["albert"], config, part="albert")
    batch = _batch(config.vocab_size)
    with torch.no_grad():
        output = backbone(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                          token_type_ids=torch.tensor(batch["token_type_ids"], dtype=torch.long),
                          attention_mask=torch.tensor(batch["attention_mask"], dtype=torch.long))
    sequence_output, pooled_output = jax.jit(AlbertModel(config).apply)(
        {"params": params["albert"]}, batch["input_ids"], batch["token_type_ids"],
        batch["attention_mask"])
    np.testing.assert_allclose(sequence_output, output.last_hidden_state.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(pooled_output, output.pooler_output.numpy(), rtol=0, atol=1e-5)
    save_huggingface(config, params, str(tmp_path / "out"))
    with open(tmp_path / "out" / "config.json") as config_file:
        assert json.load(config_file)["architectures"] == ["AlbertModel"]
    _, info = transformers.AlbertModel.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_files_without_a_head_or_pooler(tmp_path):
    # A pretraining file without the SOP head loads as backbone + MLM head, never invented.
    source = _saved(_hf_model({}), tmp_path / "pretraining")
    tensors = load_file(os.path.join(source, "model.safetensors"))
    save_file({key: value for key, value in tensors.items() if not key.startswith("sop_")},
              os.path.join(source, "model.safetensors"), metadata={"format": "pt"})
    config, params = load_huggingface(source)
    assert set(params) == {"albert", "predictions"}
    save_huggingface(config, params, str(tmp_path / "out"))
    with open(tmp_path / "out" / "config.json") as config_file:
        assert json.load(config_file)["architectures"] == ["AlbertForMaskedLM"]
    # transformers' AlbertForMaskedLM has no pooler, which our backbone needs.
    with pytest.raises(ValueError, match="no pooler"):
        load_huggingface(_saved(_hf_model({}, cls=transformers.AlbertForMaskedLM), tmp_path / "mlm"))


def test_embedding_mapping_when_e_equals_h(tmp_path):
    """HF keeps embedding_hidden_mapping_in when E == H (SPEC 11.2): loading keeps it too; a model
    of ours without it (the reference layout, SPEC 3.2.4) exports as the identity mapping."""
    config, params = load_huggingface(_saved(_hf_model(CONFIGS["embedding_equals_hidden"]), tmp_path))
    assert config.always_project_embeddings
    assert params["albert"]["encoder"]["embedding_hidden_mapping_in"]["kernel"].shape == (32, 32)
    reference_layout = get_config("tiny", embedding_size=32)
    assert not reference_layout.always_project_embeddings
    ours = nn.unbox(AlbertForPreTraining(reference_layout).init(
        jax.random.PRNGKey(0), *pretraining_init_inputs(8, 2))["params"])
    assert "embedding_hidden_mapping_in" not in ours["albert"]["encoder"]
    save_huggingface(reference_layout, ours, str(tmp_path / "exported"))
    tensors = load_file(os.path.join(tmp_path / "exported", "model.safetensors"))
    np.testing.assert_array_equal(tensors[f"{MAPPING}.weight"], np.eye(32, dtype=np.float32))
    np.testing.assert_array_equal(tensors[f"{MAPPING}.bias"], np.zeros(32, np.float32))


def test_weight_errors_name_the_tensors(tmp_path):
    source = _saved(_hf_model({}), tmp_path / "good")
    tensors = load_file(os.path.join(source, "model.safetensors"))
    broken = dict(tensors)
    del broken["albert.pooler.bias"]
    broken["albert.extra.weight"] = np.zeros(3, np.float32)
    broken["predictions.dense.weight"] = np.zeros((16, 31), np.float32)
    os.makedirs(tmp_path / "bad")
    save_file(broken, str(tmp_path / "bad" / "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(source, "config.json")) as src, open(tmp_path / "bad" / "config.json", "w") as dst:
        dst.write(src.read())
    with pytest.raises(ValueError) as error:
        load_huggingface(str(tmp_path / "bad"))
    message = str(error.value)
    assert "missing variables ['albert.pooler.bias']" in message
    assert "unknown variables ['albert.extra.weight']" in message
    assert "predictions.dense.weight has shape (16, 31), the config needs (16, 32)" in message


def test_untied_decoder_is_refused(tmp_path):
    source = _saved(_hf_model({}), tmp_path)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    tensors["predictions.decoder.weight"] = tensors["albert.embeddings.word_embeddings.weight"] + 1
    save_file(tensors, os.path.join(source, "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="tied"):
        load_huggingface(source)


def test_save_refuses_what_hf_cannot_compute_and_keeps_existing_files(tmp_path):
    # HF groups layer l by int(l / (L / G)): for L=18, G=14 layer 9 lands in group 6, the
    # reference's int(9 / 18 * 14) is 7 (SPEC 3.3).
    config = get_config("tiny", num_hidden_layers=18, num_hidden_groups=14)
    with pytest.raises(ConfigError, match=r"layers \[9\]"):
        save_huggingface(config, {}, str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="sharing"):
        save_huggingface(get_config("bert-base"), {}, str(tmp_path / "out"))
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    config = get_config("tiny")
    with pytest.raises(FileExistsError, match="not empty"):
        save_huggingface(config, _random_params(config, 0), str(occupied))
    assert (occupied / "keep.txt").read_text() == "mine"
    assert sorted(os.listdir(occupied)) == ["keep.txt"]
