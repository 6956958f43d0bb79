"""The model config (a frozen dataclass), the one table of presets, and their validation.

`ModelConfig` has the fields of the reference `AlbertConfig` (SPEC 3.1) plus our own: `sharing`
(paper Table 4), `remat_policy` and `dtype` (compute dtype; parameters are always float32),
`scan_unroll` (groups of at most this many layers are unrolled, deeper ones scanned) and
`attention_impl` (which attention kernel: model/attention.py). It is
frozen and validated when built, so a model module can trust every field.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from albert_jax.errors import ConfigError

# Activation names are explicit on purpose: the reference's "gelu" is the tanh form
# (SPEC 3.2.8) while HuggingFace's "gelu" is the exact erf form (transformers#2395).
ACTIVATIONS = ("gelu_tanh", "gelu_exact", "relu")
# Paper Table 4: which blocks are shared across the L layers.
#   all: attention and FFN shared (ALBERT); attention: only attention shared (FFN per layer);
#   ffn: only FFN shared (attention per layer); none: nothing shared (BERT).
SHARING_MODES = ("all", "attention", "ffn", "none")
# What the backward pass may keep from the forward pass of each layer (None: everything).
REMAT_POLICIES: dict[str, Callable[..., bool] | None] = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.checkpoint_dots,
    "dots_no_batch": jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims,
}
DTYPES = ("float32", "bfloat16")
# How attention's softmax(q k^T) v is computed (model/attention.py); not what: the parameters
# and a checkpoint are the same under every one.
ATTENTION_IMPLS = ("auto", "xla", "splash", "cudnn")

@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Every field of a model, with its default (SPEC 3.1, except those the presets always set).

    Frozen (a typo or a stray assignment raises) and validated when built: a field that cannot
    work raises ConfigError naming it. Build one with `get_config` or `from_dict`.
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu_tanh"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12  # SPEC 3.2.3
    # HF applies embedding_hidden_mapping_in even when E == H (SPEC 11.2); the reference has no
    # such layer then (SPEC 3.2.4). True keeps it, so HF models with E == H load exactly.
    always_project_embeddings: bool = False
    sharing: str = "all"
    remat_policy: str = "none"
    dtype: str = "float32"
    # A group of at most this many layers is unrolled whole (unless remat is on: remat needs the
    # rolled scan, encoder.py): XLA then neither zero-fills nor copies the stacked per-layer
    # activations the backward pass reads (~10 % of an albert-base step on CPU,
    # benchmarks/RESULTS.md). A deeper group is scanned one layer per iteration,
    # so its compile time stays that of one layer: partial unrolling (12 layers per iteration
    # at L=48) measured 2.5x the compile time of L=12, full scan 1.0x (benchmarks/bench_compile.py).
    scan_unroll: int = 12
    # "auto": splash on TPU, cudnn on GPU (bfloat16), xla elsewhere or with attention dropout.
    attention_impl: str = "auto"

    def __post_init__(self) -> None:
        validate(self)

    @property
    def compute_dtype(self) -> jnp.dtype:
        """The dtype activations and matmul inputs are computed in (`dtype`)."""
        return jnp.dtype(self.dtype)

    def to_dict(self) -> dict[str, Any]:
        """Every field by name (what config.json and weights-only checkpoints record)."""
        return dataclasses.asdict(self)


_FIELDS = tuple(field.name for field in dataclasses.fields(ModelConfig))

def _albert(hidden: int, layers: int, heads: int, version: int) -> dict[str, Any]:
    # SPEC 7.1: v1 has dropout 0.1 (xxlarge 0), v2 none; both use the tanh GELU (SPEC 3.2.8).
    dropout = 0.1 if version == 1 and hidden != 4096 else 0.0
    return dict(embedding_size=128, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden,
                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def _bert(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    # BERT for comparison (paper Table 1): E = H, nothing shared, dropout 0.1, V = 30000.
    return dict(embedding_size=hidden, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden, sharing="none",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


PRESETS: dict[str, dict[str, Any]] = {
    **{f"albert-{size}-v{version}": _albert(hidden, layers, heads, version)
       for size, hidden, layers, heads in (
           ("base", 768, 12, 12),
           ("large", 1024, 24, 16),
           ("xlarge", 2048, 24, 16),  # 16 heads of 128, not H/64 (SPEC 7.1 note a)
           ("xxlarge", 4096, 12, 64),
       )
       for version in (1, 2)},
    # SPEC 7.1d: the Chinese models (albert_*_zh, a WordPiece vocab_chinese.txt, SPEC 2.5).
    **{f"albert-{size}-zh": dict(_albert(hidden, layers, heads, version=2), vocab_size=21128,
                                 hidden_act="relu", initializer_range=initializer_range)
       for size, hidden, layers, heads, initializer_range in (
           ("base", 768, 12, 12, 0.02),
           ("large", 1024, 24, 16, 0.02),
           ("xlarge", 2048, 24, 16, 0.014),
           ("xxlarge", 4096, 12, 16, 0.01),  # 16 heads of 256, unlike the English 64
       )},
    "bert-base": _bert(768, 12, 12),
    "bert-large": _bert(1024, 24, 16),
    # Tests: every code path (projection E != H, several heads) at toy size.
    "tiny": dict(vocab_size=128, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=64, max_position_embeddings=64),
    # The demo: learns SOP and MLM on a laptop CPU in minutes.
    "demo": dict(vocab_size=4000, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                 num_attention_heads=2, intermediate_size=512, max_position_embeddings=128),
}


def get_config(name: str, **overrides: Any) -> ModelConfig:
    """The model config of preset `name`, with field `overrides` applied.

    Raises ConfigError naming the preset, key or value that is wrong.
    """
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return from_dict(dict(PRESETS[name], **overrides))


def from_dict(fields: Mapping[str, Any]) -> ModelConfig:
    """The model config of `fields` (e.g. a saved config.json); missing fields take defaults."""
    unknown = sorted(set(fields) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"unknown model config key(s) {unknown}; known keys: {sorted(_FIELDS)}")
    return ModelConfig(**fields)


def validate(config: ModelConfig) -> None:
    """Raises ConfigError, naming the key and value, for a model config that cannot work."""

    def fail(key: str, why: str) -> None:
        raise ConfigError(f"model config {key}={getattr(config, key)!r}: {why}")

    for key in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                "num_hidden_groups", "inner_group_num", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size"):
        value = getattr(config, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            fail(key, "must be a positive integer")
    if config.hidden_size % config.num_attention_heads:
        fail("hidden_size", f"must be divisible by num_attention_heads={config.num_attention_heads}")
    if config.num_hidden_groups > config.num_hidden_layers:
        fail("num_hidden_groups",
             f"cannot exceed num_hidden_layers={config.num_hidden_layers} (each group needs a layer)")
    if config.sharing not in SHARING_MODES:
        fail("sharing", f"must be one of {SHARING_MODES}")
    if config.sharing != "all" and config.num_hidden_groups != 1:
        fail("num_hidden_groups", f"groups apply to sharing='all' only (got sharing={config.sharing!r})")
    if config.hidden_act not in ACTIVATIONS:
        fail("hidden_act", f"must be one of {ACTIVATIONS} (the reference 'gelu' is 'gelu_tanh')")
    if config.remat_policy not in REMAT_POLICIES:
        fail("remat_policy", f"must be one of {tuple(REMAT_POLICIES)}")
    if not isinstance(config.scan_unroll, int) or config.scan_unroll < 1:
        fail("scan_unroll", "must be a positive integer")
    if not isinstance(config.always_project_embeddings, bool):
        fail("always_project_embeddings", "must be true or false")
    if config.dtype not in DTYPES:
        fail("dtype", f"must be one of {DTYPES}")
    for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        if not 0.0 <= getattr(config, key) < 1.0:
            fail(key, "must be in [0, 1)")
    if config.attention_impl not in ATTENTION_IMPLS:
        fail("attention_impl", f"must be one of {ATTENTION_IMPLS}")
    if config.attention_impl in ("splash", "cudnn"):
        # The fused kernels have no dropout on the probabilities; running without it would
        # train a different model than asked.
        if config.attention_probs_dropout_prob > 0:
            fail("attention_impl", f"has no attention dropout, but attention_probs_dropout_prob="
                 f"{config.attention_probs_dropout_prob}; set it to 0 or attention_impl='xla'")
        if config.attention_impl == "cudnn" and config.dtype == "float32":
            fail("attention_impl", "cuDNN's fused attention runs bfloat16, not float32; set "
                 "dtype='bfloat16' or attention_impl='xla'")
    if not config.initializer_range > 0:
        fail("initializer_range", "must be positive")
    if not config.layer_norm_eps > 0:
        fail("layer_norm_eps", "must be positive")


def group_of_layer(layer_index: int, num_layers: int, num_groups: int) -> int:
    """The parameter group that layer `layer_index` uses: int(l / L * G) (SPEC 3.3)."""
    return int(layer_index / num_layers * num_groups)
