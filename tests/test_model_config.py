"""Model presets (SPEC 7.1), config validation, and the run config -> model config path."""
from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
from types import ModuleType

import pytest
from absl import flags
from ml_collections import config_flags

from albert_jax import config as run_config
from albert_jax.errors import ConfigError
from albert_jax.model import PRESETS, ModelConfig, from_dict, get_config

REPO = pathlib.Path(__file__).resolve().parent.parent
PRETRAIN_CONFIG = REPO / "configs" / "pretrain.py"

# SPEC 7.1, transcribed: size -> (L, H, I, heads). All: E=128, V=30000, P=512, T=2, init 0.02,
# groups 1, inner 1, LayerNorm eps 1e-12.
SPEC_7_1 = {
    "base": (12, 768, 3072, 12),
    "large": (24, 1024, 4096, 16),
    "xlarge": (24, 2048, 8192, 16),  # note (a): 16 heads of 128, not H/64 = 32
    "xxlarge": (12, 4096, 16384, 64),
}
OFFICIAL = [f"albert-{size}-v{version}" for size in SPEC_7_1 for version in (1, 2)]
CHINESE = [f"albert-{size}-zh" for size in SPEC_7_1]  # SPEC 7.1d; tests/test_model.py


def test_the_preset_table_is_exactly_the_documented_names() -> None:
    assert set(PRESETS) == set(OFFICIAL) | set(CHINESE) | {"bert-base", "bert-large", "tiny", "demo"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_frozen_valid_config(name: str) -> None:
    config = get_config(name)
    assert isinstance(config, ModelConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.hidden_size = 8  # a model config never changes under a running model
    assert config.hidden_size % config.num_attention_heads == 0
    assert config.dtype == "float32" and config.remat_policy == "none"
    # Every official checkpoint (and BERT, whose TF "gelu" is the same function) uses the tanh
    # GELU (SPEC 3.2.8), never HF's exact "gelu" (transformers#2395); the Chinese ones ReLU.
    assert config.hidden_act == ("relu" if name in CHINESE else "gelu_tanh")


@pytest.mark.parametrize("name", OFFICIAL)
def test_albert_presets_match_spec_7_1(name: str) -> None:
    size, version = name.split("-")[1], int(name[-1])
    config = get_config(name)
    layers, hidden, intermediate, heads = SPEC_7_1[size]
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size,
            config.num_attention_heads) == (layers, hidden, intermediate, heads)
    assert (config.embedding_size, config.vocab_size, config.max_position_embeddings,
            config.type_vocab_size) == (128, 30000, 512, 2)
    assert (config.num_hidden_groups, config.inner_group_num, config.sharing) == (1, 1, "all")
    assert config.initializer_range == 0.02
    assert config.layer_norm_eps == 1e-12
    # SPEC 7.1: v1 dropout 0.1 except xxlarge (0); v2 dropout 0.
    expected_dropout = 0.1 if version == 1 and size != "xxlarge" else 0.0
    assert config.hidden_dropout_prob == expected_dropout
    assert config.attention_probs_dropout_prob == expected_dropout


def test_xlarge_has_16_heads_of_128() -> None:
    for version in (1, 2):
        config = get_config(f"albert-xlarge-v{version}")
        assert config.num_attention_heads == 16
        assert config.hidden_size // config.num_attention_heads == 128


@pytest.mark.parametrize("name,layers,hidden,heads", [("bert-base", 12, 768, 12),
                                                      ("bert-large", 24, 1024, 16)])
def test_bert_presets_are_unshared_with_full_width_embeddings(name: str, layers: int,
                                                              hidden: int, heads: int) -> None:
    # Paper Table 1: BERT has E = H and no sharing.
    config = get_config(name)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        layers, hidden, heads)
    assert config.embedding_size == hidden and config.intermediate_size == 4 * hidden
    assert config.sharing == "none"
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.1


def test_overrides_apply_and_validate() -> None:
    config = get_config("albert-base-v2", num_hidden_layers=24, dtype="bfloat16")
    assert config.num_hidden_layers == 24 and config.dtype == "bfloat16"
    assert get_config("albert-base-v2").num_hidden_layers == 12  # the table is not mutated


def test_configs_are_locked() -> None:
    config = get_config("tiny")
    with pytest.raises(AttributeError, match="hiden_size"):
        config.hiden_size = 64  # a typo must not silently add a field
    with pytest.raises(ConfigError, match=r"unknown model config key\(s\) \['hiden_size'\]"):
        get_config("tiny", hiden_size=64)
    with pytest.raises(ConfigError, match="hiden_size"):
        from_dict(dict(get_config("tiny").to_dict(), hiden_size=64))


def test_from_dict_round_trips_a_saved_config() -> None:
    saved = get_config("albert-large-v1", num_hidden_layers=6).to_dict()
    assert from_dict(saved).to_dict() == saved


@pytest.mark.parametrize("overrides,key,value,why", [
    (dict(hidden_size=30), "hidden_size", "30", "divisible by num_attention_heads=4"),
    (dict(num_hidden_groups=3), "num_hidden_groups", "3", "num_hidden_layers=2"),
    (dict(num_hidden_groups=2, sharing="none"), "num_hidden_groups", "2", "sharing='none'"),
    (dict(sharing="some"), "sharing", "'some'", "must be one of"),
    (dict(hidden_act="gelu"), "hidden_act", "'gelu'", "gelu_tanh"),
    (dict(hidden_act="swish"), "hidden_act", "'swish'", "must be one of"),
    (dict(dtype="float16"), "dtype", "'float16'", "must be one of"),
    (dict(remat_policy="everything"), "remat_policy", "'everything'", "must be one of"),
    (dict(vocab_size=-1), "vocab_size", "-1", "positive integer"),
    (dict(num_hidden_layers=0), "num_hidden_layers", "0", "positive integer"),
    (dict(intermediate_size=-64), "intermediate_size", "-64", "positive integer"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob", "1.0", "[0, 1)"),
    (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob", "-0.1", "[0, 1)"),
    (dict(initializer_range=0.0), "initializer_range", "0.0", "positive"),
    (dict(layer_norm_eps=0.0), "layer_norm_eps", "0.0", "positive"),
    (dict(attention_impl="flash"), "attention_impl", "'flash'", "must be one of"),
    # A fused attention kernel asked for with attention dropout is refused, not run without it.
    (dict(attention_impl="splash", attention_probs_dropout_prob=0.1), "attention_impl",
     "'splash'", "attention_probs_dropout_prob=0.1; set it to 0 or attention_impl='xla'"),
    (dict(attention_impl="cudnn", dtype="bfloat16", attention_probs_dropout_prob=0.1),
     "attention_impl", "'cudnn'", "no attention dropout"),
    (dict(attention_impl="cudnn"), "attention_impl", "'cudnn'", "dtype='bfloat16'"),
])
def test_invalid_values_name_the_key_and_value(overrides: dict, key: str, value: str,
                                              why: str) -> None:
    with pytest.raises(ConfigError) as error:
        get_config("tiny", **overrides)
    message = str(error.value)
    assert f"{key}={value}" in message
    assert why in message


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="'albert-huge-v2'") as error:
        get_config("albert-huge-v2")
    assert "albert-base-v2" in str(error.value)


# ----------------------------------------------------------------------------------------------
# configs/pretrain.py and albert_jax.config.model_config.
# ----------------------------------------------------------------------------------------------

def pretrain_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pretrain_config", PRETRAIN_CONFIG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arg,model", [
    (None, "albert-base-v2"),
    ("size=large", "albert-large-v2"),
    ("size=xxlarge", "albert-xxlarge-v2"),
    ("model=bert-base", "bert-base"),
    ("model=albert-base-v1", "albert-base-v1"),
    ("runlocal", "demo"),
])
def test_pretrain_config_arguments_pick_the_model(arg: str | None, model: str) -> None:
    config = pretrain_module().get_config(arg)
    assert config.model == model
    assert config.is_locked
    resolved = run_config.model_config(config)
    assert resolved.num_hidden_layers == get_config(model).num_hidden_layers


def test_runlocal_shrinks_the_run() -> None:
    config = pretrain_module().get_config("runlocal")
    assert config.seq_len <= get_config("demo").max_position_embeddings
    assert config.batch_size < 4096
    # data.vocab_size (the tokenizer's size) flows into the model.
    assert run_config.model_config(config).vocab_size == config.data.vocab_size
    config.data.vocab_size = 1234
    assert run_config.model_config(config).vocab_size == 1234


def test_pretrain_data_defaults_are_the_reference_flags() -> None:
    # SPEC 1.1 "Ours": the flag defaults of the reference's create_pretraining_data.py,
    # transcribed from its table (max_seq_length, max_predictions_per_seq, masked_lm_prob,
    # dupe_factor, short_seq_prob, ngram, favor_shorter_ngram, random_next_sentence=False,
    # do_lower_case, random_seed), and the SPEC 2.3 digit-comma rule of the reference.
    config = pretrain_module().get_config(None)
    data = config.data
    assert (config.seq_len, data.max_predictions, data.masked_lm_prob, data.dupe_factor,
            data.short_seq_prob, data.max_ngram, data.favor_shorter_ngram,
            data.sentence_objective, data.do_lower_case, config.seed) == (
        512, 20, 0.15, 40, 0.1, 3, True, "sop", True, 12345)
    assert data.comma_rule == "reference"


def test_unknown_pretrain_argument_is_rejected() -> None:
    with pytest.raises(ConfigError, match="'sise'"):
        pretrain_module().get_config("sise=large")


def test_model_config_applies_overrides_and_compute_dtype() -> None:
    config = pretrain_module().get_config("size=base")
    config.model_overrides.num_hidden_layers = 3
    config.model_overrides.sharing = "none"
    config.compute_dtype = "bfloat16"
    model = run_config.model_config(config)
    assert (model.num_hidden_layers, model.sharing, model.dtype) == (3, "none", "bfloat16")
    assert model.hidden_size == 768  # untouched fields keep the preset
    # An explicit model_overrides.dtype wins over compute_dtype.
    config.model_overrides.dtype = "float32"
    assert run_config.model_config(config).dtype == "float32"


def test_model_config_rejects_bad_overrides_and_long_sequences() -> None:
    config = pretrain_module().get_config("runlocal")
    config.model_overrides.num_attention_heads = 5
    with pytest.raises(ConfigError, match="hidden_size=128"):
        run_config.model_config(config)
    config = pretrain_module().get_config("runlocal")
    config.seq_len = 512  # the demo model has 128 positions
    with pytest.raises(ConfigError, match="seq_len=512"):
        run_config.model_config(config)


def test_command_line_override_reaches_the_model() -> None:
    # The path `albert-jax pretrain --config=configs/pretrain.py:runlocal
    # --config.model_overrides.num_hidden_layers=3` takes, through ml_collections' config flag.
    argv = ["albert-jax", f"--config={PRETRAIN_CONFIG}:runlocal",
            "--config.model_overrides.num_hidden_layers=3",
            "--config.model_overrides.hidden_act=gelu_exact",
            "--config.compute_dtype=bfloat16"]
    flag_values = flags.FlagValues()
    # sys_argv: the config flag finds its override flags in this list instead of sys.argv.
    config_flags.DEFINE_config_file("config", None, "run config", flag_values=flag_values,
                                    lock_config=True, sys_argv=argv)
    flag_values(argv)
    model = run_config.model_config(flag_values.config)
    assert (model.num_hidden_layers, model.hidden_act, model.dtype) == (3, "gelu_exact", "bfloat16")
    assert model.hidden_size == get_config("demo").hidden_size


def test_seq_len_may_exceed_the_preset_when_max_positions_is_overridden() -> None:
    config = pretrain_module().get_config("runlocal")
    config.seq_len = 512  # the demo model has 128 positions
    config.model_overrides.max_position_embeddings = 512
    assert run_config.model_config(config).max_position_embeddings == 512


def test_a_v1_preset_with_splash_is_a_one_line_error_from_the_command_line() -> None:
    """albert-base-v1 has attention dropout 0.1 (SPEC 7.1): splash would silently drop it."""
    with pytest.raises(ConfigError) as error:
        get_config("albert-base-v1", attention_impl="splash")
    assert "\n" not in str(error.value) and "attention_probs_dropout_prob=0.1" in str(error.value)
    assert get_config("albert-base-v1", attention_impl="auto").attention_impl == "auto"
