"""A/B of model-side speed changes, measured without editing albert_jax/model: each variant is
a subclass of a model module put in the module's place while its contender is traced and
compiled, then taken out.

  .venv/bin/python -m benchmarks.ab_model_variants [--case=finetune|train] [--repeats=5]
      [--dtype=float32|bfloat16]
      [--variants=layernorm_fast_variance,dot_product_attention,...]

Contenders, interleaved as in bench_table (A, B, C, ... per round, medians of per-round ratios):
our current step, our step with each variant, and HuggingFace Flax. The case is bench_table's
`finetune` (GlueTask + AdamW, albert-base, batch 8, seq 128) or `train_base` (fp32 LAMB).
Before timing, each variant's loss and gradients are checked against the current model's on the
same batch (max relative difference printed), so a faster variant that changes the numerics shows.

Variants (why: the fine-tuning profile in benchmarks/RESULTS.md; `layernorm_vjp`, the
closed-form LayerNorm backward, measured 1.03x on the train step and moved into
model/layers.py):
  layernorm_fast_variance  variance as E[x^2] - E[x]^2 in one pass (flax nn.LayerNorm's default,
                           what HF Flax runs), autodiff backward.
  dot_product_attention    scores, softmax and context through jax.nn.dot_product_attention.
  dense_low_precision_grads   (for --dtype=bfloat16) Dense's backward dots bf16 x bf16 -> f32
                           through a custom VJP (the cotangent rounded to bf16).
  dense_compute_dtype_output  (for --dtype=bfloat16) Dense's dot outputs bf16 (rounded before
                           the bias add), so autodiff's backward dots are bf16 x bf16.
  attention_low_precision_grads  (for --dtype=bfloat16) the same custom VJP for the attention's
                           scores and context einsums.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import math
from typing import Any, Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from albert_jax import pretraining
from albert_jax.finetune.task import GlueTask
from albert_jax.model import ModelConfig, encoder, get_config, layers
from benchmarks import bench_table
from configs import glue as glue_config

# ---------------------------------------------------------------------------------------------
# LayerNorm variants: subclasses of layers.LayerNorm (same parameters and names).


def _layer_norm_params(module: layers.LayerNorm, features: int) -> tuple[jax.Array, jax.Array]:
    scale = module.param("scale", nn.with_logical_partitioning(nn.initializers.ones,
                                                               (module.axis_name,)),
                         (features,), jnp.float32)
    bias = module.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                             (module.axis_name,)),
                        (features,), jnp.float32)
    return scale, bias


class LayerNormFastVariance(layers.LayerNorm):
    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        scale, bias = _layer_norm_params(self, inputs.shape[-1])
        x = inputs.astype(jnp.float32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        variance = jnp.maximum(jnp.mean(jnp.square(x), axis=-1, keepdims=True)
                               - jnp.square(mean), 0.0)
        normed = (x - mean) * jax.lax.rsqrt(variance + self.epsilon)
        return (normed * scale + bias).astype(self.dtype)


# ---------------------------------------------------------------------------------------------
# Attention variants: subclasses of encoder.AttentionBlock that replace its core.


class _AttentionVariant(encoder.AttentionBlock):
    """encoder.AttentionBlock (no dropout: the variants are measured without it) with the
    scores -> softmax -> context core replaced by `attend`; the projections, output and
    LayerNorm as the model has them (same parameters and names)."""

    variant = ""

    def attend(self, query: jax.Array, key: jax.Array, value: jax.Array,
               attention_bias: jax.Array) -> jax.Array:
        """[batch, q, heads, head_dim] x2 [batch, k, heads, head_dim] -> context
        [batch, q, heads, head_dim]."""
        raise NotImplementedError

    @nn.compact
    def __call__(self, hidden: jax.Array, attention_bias: jax.Array,
                 query_positions: jax.Array | None = None) -> jax.Array:
        config = self.config
        dtype = config.compute_dtype
        batch, _, width = hidden.shape
        heads = config.num_attention_heads
        init = layers.truncated_normal(config.initializer_range)
        if config.attention_probs_dropout_prob > 0 or config.hidden_dropout_prob > 0:
            raise ValueError(f"the {self.variant} variant is measured without dropout")
        queries_from = (hidden if query_positions is None
                        else layers.gather_positions(hidden, query_positions))

        def project(name: str, inputs: jax.Array) -> jax.Array:
            out = layers.Dense(width, ("hidden", "heads"), init, dtype=dtype, name=name)(inputs)
            return out.reshape(batch, -1, heads, width // heads)

        query = project("query", queries_from)
        key, value = project("key", hidden), project("value", hidden)
        context = self.attend(query, key, value, attention_bias).astype(dtype)
        output = layers.Dense(width, ("heads", "hidden"), init, dtype=dtype,
                              name="output")(context.reshape(batch, -1, width))
        return layers.LayerNorm(config.layer_norm_eps, "hidden", dtype=dtype,
                                name="LayerNorm")(output + queries_from)


class DotProductAttentionBlock(_AttentionVariant):
    variant = "dot_product_attention"

    def attend(self, query: jax.Array, key: jax.Array, value: jax.Array,
               attention_bias: jax.Array) -> jax.Array:
        return jax.nn.dot_product_attention(query, key, value, bias=attention_bias,
                                            scale=1.0 / math.sqrt(query.shape[-1]))


# bf16 compute: XLA on CPU runs the forward dots on bf16 inputs, but the backward dots on float32
# (the cotangent of a dot with float32 output is float32, and the bf16 operand is converted up),
# plus ~1,700 standalone converts (benchmarks/RESULTS.md). Two Dense variants that make the
# backward dots bf16 x bf16 -> float32 as well:


@jax.custom_vjp
def _dot_with_low_precision_grads(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """x [..., in] @ kernel [in, out] -> float32; the backward dots take the cotangent rounded
    to the inputs' dtype (bf16 x bf16 -> float32, as the forward)."""
    return jnp.dot(x, kernel, preferred_element_type=jnp.float32)


def _dot_forward(x, kernel):
    return _dot_with_low_precision_grads(x, kernel), (x, kernel)


def _dot_backward(saved, upstream):
    x, kernel = saved
    upstream = upstream.astype(x.dtype)
    grad_x = jnp.dot(upstream, kernel.T, preferred_element_type=jnp.float32)
    grad_kernel = jnp.dot(x.reshape(-1, x.shape[-1]).T, upstream.reshape(-1, upstream.shape[-1]),
                          preferred_element_type=jnp.float32)
    return grad_x.astype(x.dtype), grad_kernel.astype(kernel.dtype)


_dot_with_low_precision_grads.defvjp(_dot_forward, _dot_backward)


class _DenseVariant(layers.Dense):
    def kernel_and_bias(self, inputs: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        kernel = self.param("kernel", nn.with_logical_partitioning(self.kernel_init, self.axes),
                            (inputs.shape[-1], self.features), jnp.float32)
        kernel = nn.with_logical_constraint(
            kernel.astype(self.dtype),
            tuple(layers._KERNEL_AT_USE.get(axis) for axis in self.axes))
        bias = None
        if self.use_bias:
            bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                                   self.axes[1:]),
                              (self.features,), jnp.float32)
        return kernel, bias


class DenseLowPrecisionGrads(_DenseVariant):
    """Forward as layers.Dense; backward dots bf16 x bf16 (custom VJP)."""

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel, bias = self.kernel_and_bias(inputs)
        outputs = _dot_with_low_precision_grads(inputs.astype(self.dtype), kernel)
        return (outputs if bias is None else outputs + bias).astype(self.dtype)


class DenseComputeDtypeOutput(_DenseVariant):
    """The dot's output in the compute dtype (bf16: rounded before the bias add, not after), so
    autodiff's backward dots see a bf16 cotangent."""

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        kernel, bias = self.kernel_and_bias(inputs)
        outputs = jnp.dot(inputs.astype(self.dtype), kernel, preferred_element_type=self.dtype)
        return (outputs if bias is None else outputs + bias).astype(self.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _einsum_with_low_precision_grads(spec: str, a: jax.Array, b: jax.Array) -> jax.Array:
    """einsum -> float32, whose backward einsums take the cotangent rounded to a's dtype."""
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def _einsum_forward(spec, a, b):
    return _einsum_with_low_precision_grads(spec, a, b), (a, b)


def _einsum_backward(spec, saved, upstream):
    a, b = saved
    _, backward = jax.vjp(lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=a.dtype),
                          a, b)
    return backward(upstream.astype(a.dtype))


_einsum_with_low_precision_grads.defvjp(_einsum_forward, _einsum_backward)


class AttentionLowPrecisionGrads(_AttentionVariant):
    """encoder.AttentionBlock (no dropout) with the scores and context einsums' backward dots
    bf16 x bf16."""

    variant = "attention_low_precision_grads"

    def attend(self, query: jax.Array, key: jax.Array, value: jax.Array,
               attention_bias: jax.Array) -> jax.Array:
        scores = _einsum_with_low_precision_grads("bqnd,bknd->bnqk", query, key)
        probs = jax.nn.softmax(scores * (1.0 / math.sqrt(query.shape[-1])) + attention_bias,
                               axis=-1)
        return _einsum_with_low_precision_grads("bnqk,bknd->bqnd",
                                                probs.astype(query.dtype), value)


# variant -> (module whose global is replaced, the global's name, the replacement). The model
# looks these names up when it is traced, so the replacement holds for what is traced inside.
VARIANTS: dict[str, tuple[Any, str, type]] = {
    "layernorm_fast_variance": (layers, "LayerNorm", LayerNormFastVariance),
    "dot_product_attention": (encoder, "AttentionBlock", DotProductAttentionBlock),
    "dense_low_precision_grads": (layers, "Dense", DenseLowPrecisionGrads),
    "dense_compute_dtype_output": (layers, "Dense", DenseComputeDtypeOutput),
    "attention_low_precision_grads": (encoder, "AttentionBlock", AttentionLowPrecisionGrads),
}


@contextlib.contextmanager
def patched(variant: str | None) -> Iterator[None]:
    """`variant`'s modules in place of the model's while the block runs (None: unpatched).
    "a+b" applies variants a and b together."""
    with contextlib.ExitStack() as stack:
        for name in (variant.split("+") if variant else []):
            module, attribute, replacement = VARIANTS[name]
            stack.callback(setattr, module, attribute, getattr(module, attribute))
            setattr(module, attribute, replacement)
        yield


# ---------------------------------------------------------------------------------------------


def loss_and_grads(case: str, variant: str | None,
                   dtype: str) -> tuple[float, list[np.ndarray]]:
    """Loss and gradients of the case's model on bench_table's batch, with `variant` patched."""
    config = get_config("albert-base-v2", dtype=dtype)
    batch = bench_table.pretraining_batch(8, config.vocab_size)
    with patched(variant):
        if case == "finetune":
            model = GlueTask(glue_config.get_config("task=mrpc"), config, tokenizer=None,
                             pretrained=None).model
            inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"])
            labels = batch["next_sentence_labels"][:, 0]
        else:
            model = pretraining.AlbertForPreTraining(config)
            inputs = (batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                      batch["masked_lm_positions"])
            labels = batch["masked_lm_ids"]
        params = jax.tree.map(jnp.asarray, nn.unbox(
            model.init(jax.random.PRNGKey(0), *inputs)["params"]))

        def loss_fn(params: Any) -> jax.Array:
            logits = model.apply({"params": params}, *inputs)
            logits = logits if case == "finetune" else logits[0]
            log_probs = jax.nn.log_softmax(logits.astype(jnp.float32))
            return -jnp.mean(jnp.take_along_axis(log_probs, labels[..., None], -1))

        loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
    return float(loss), [np.asarray(leaf) for leaf in jax.tree.leaves(grads)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="finetune", choices=("finetune", "train"))
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated; a+b measures a and b together")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                        help="our compute dtype (HF Flax stays float32)")
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = sorted({name for variant in variants for name in variant.split("+")} - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {sorted(VARIANTS)}")

    reference_loss, reference_grads = loss_and_grads(args.case, None, args.dtype)
    for variant in variants:
        loss, grads = loss_and_grads(args.case, variant, args.dtype)
        # Leaves whose gradient is zero up to rounding (the attention key bias: softmax does
        # not see a per-query constant) are left out: their relative difference is noise.
        largest = max(np.linalg.norm(g) for g in reference_grads)
        worst = max(float(np.linalg.norm(a - b) / np.linalg.norm(b))
                    for a, b in zip(grads, reference_grads) if np.linalg.norm(b) > 1e-6 * largest)
        print(f"{variant}: loss {loss:.6f} vs {reference_loss:.6f}; largest relative gradient "
              f"difference over the leaves (||g - g_ref|| / ||g_ref||) {worst:.1e}", flush=True)

    config = get_config("albert-base-v2", dtype=args.dtype)
    full = bench_table.full_length_batch(8, config.vocab_size)

    def build(name: str, model_config: ModelConfig, hf: bool = False) -> bench_table.Contender:
        if args.case == "finetune":
            return (bench_table.hf_finetune if hf else bench_table.ours_finetune)(
                name, model_config, full)
        return (bench_table.hf_train if hf else bench_table.ours_train)(name, model_config, 8)

    contenders = [build("current", config)]
    for variant in variants:
        with patched(variant):
            contenders.append(build(variant, config))
    if bench_table.HF_MISSING is None:
        contenders.append(build("HF Flax", get_config("albert-base-v2"), hf=True))
    times = bench_table.interleave(contenders, args.repeats, 1)
    print(f"{args.case}, albert-base ({args.dtype}) batch 8 seq 128, {args.repeats} interleaved "
          "rounds, medians")
    for contender in contenders:
        own = times[contender.name]
        line = f"{contender.name:34s} {np.median(own):7.3f} s"
        if contender.name != "current":
            line += f"   current / this {bench_table.median_ratio(times['current'], own):.3f}x"
        if "HF Flax" in times and contender.name != "HF Flax":
            line += f"   vs HF {bench_table.median_ratio(times['HF Flax'], own):.3f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
