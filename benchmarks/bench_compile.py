"""Compile time of the pretraining gradient versus depth: nn.scan over the shared layer vs a loop.

  .venv/bin/python benchmarks/bench_compile.py [--layers=12,48] [--repeats=3] [--batch=2]

What is timed: `jax.jit(jax.grad(loss))` of the MLM + SOP loss (SPEC 5.3-5.5) of an
AlbertForPreTraining with the albert-base-v2 shape (E=128, H=768, I=3072, 12 heads, V=30000),
seq 128, 20 masked positions. `.lower()` (trace + StableHLO) and `.compile()` (XLA) are timed
apart, each the median of `--repeats` fresh compiles: jax.clear_caches() before each and a
different batch size per repeat, so nothing is reused. Inputs are abstract (ShapeDtypeStruct):
nothing is allocated or run.

Two models with the same parameters (one shared block, SPEC 3.3):
  scan  albert_jax's AlbertForPreTraining (sharing="all": the block is traced once, nn.scan).
  loop  the same Embeddings / AttentionBlock / FeedForwardBlock / heads, with the encoder as a
        Python loop calling one shared block L times: the HuggingFace Flax design (SPEC 11.1),
        whose program grows with L.
The scanned model's L=48 / L=12 total time must stay within 1.25x (the `nn.scan` design: one compiled layer, whatever L); the script
exits with status 1 otherwise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from albert_jax import pretraining
from albert_jax.model import AlbertForPreTraining, get_config, heads, layers
from albert_jax.model.albert import Embeddings
from albert_jax.model.encoder import AttentionBlock, FeedForwardBlock

SEQ_LEN = 128
MAX_PREDICTIONS = 20
MAX_SCAN_RATIO = 1.25


class LoopEncoder(nn.Module):
    """The projection and ONE shared block applied L times by a Python loop (unrolled)."""

    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, embedded: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """embedded [batch, seq, embedding], attention_mask [batch, seq] -> [batch, seq, hidden]."""
        config = self.config
        hidden = layers.Dense(config.hidden_size, ("embedding", "hidden"),
                              layers.truncated_normal(config.initializer_range),
                              dtype=config.compute_dtype,
                              name="embedding_hidden_mapping_in")(embedded)
        attention_bias = ((1.0 - attention_mask.astype(jnp.float32)) * -10000.0)[:, None, None, :]
        attention = AttentionBlock(config, name="attention")
        ffn = FeedForwardBlock(config, name="ffn")
        for _ in range(config.num_hidden_layers):
            hidden = ffn(attention(hidden, attention_bias))
        return hidden


class LoopAlbertForPreTraining(nn.Module):
    """AlbertForPreTraining with LoopEncoder in place of the scanned encoder."""

    config: ml_collections.ConfigDict

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array,
                 input_mask: jax.Array, masked_lm_positions: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        config = self.config
        embeddings = Embeddings(config, name="embeddings")
        sequence_output = LoopEncoder(config, name="encoder")(
            embeddings(input_ids, segment_ids), input_mask)
        pooled_output = jnp.tanh(layers.Dense(
            config.hidden_size, ("hidden", "hidden_out"),
            layers.truncated_normal(config.initializer_range), name="pooler")(
                sequence_output[:, 0]))
        mlm_logits = heads.MaskedLMHead(config, name="predictions")(
            layers.gather_positions(sequence_output, masked_lm_positions),
            embeddings.word_embeddings.attend)
        sop_logits = heads.ClassifierHead(config, 2, name="seq_relationship")(pooled_output)
        return mlm_logits, sop_logits


def abstract_batch(batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """The SPEC 1.5 features the loss reads, as ShapeDtypeStructs."""
    tokens = jax.ShapeDtypeStruct((batch_size, SEQ_LEN), jnp.int32)
    predictions = jax.ShapeDtypeStruct((batch_size, MAX_PREDICTIONS), jnp.int32)
    return dict(input_ids=tokens, segment_ids=tokens, input_mask=tokens,
                masked_lm_positions=predictions, masked_lm_ids=predictions,
                masked_lm_weights=jax.ShapeDtypeStruct((batch_size, MAX_PREDICTIONS), jnp.float32),
                next_sentence_labels=jax.ShapeDtypeStruct((batch_size, 1), jnp.int32))


def gradient_fn(model: nn.Module) -> Callable:
    """jax.grad of the pretraining loss (SPEC 5.3-5.5, pretraining.py's): weighted MLM
    cross-entropy + mean SOP cross-entropy."""

    def loss(params, batch):
        mlm_logits, sop_logits = model.apply(
            {"params": params}, batch["input_ids"], batch["segment_ids"],
            batch["input_mask"], batch["masked_lm_positions"])
        sums = pretraining.loss_sums(mlm_logits, sop_logits, batch)
        return pretraining.metrics_from_sums(sums, "sop")["loss"]

    return jax.grad(loss)


def parameter_count(model: nn.Module) -> int:
    return sum(leaf.size for leaf in jax.tree.leaves(abstract_params(model, abstract_batch(1))))


def abstract_params(model: nn.Module, batch: dict[str, jax.ShapeDtypeStruct]) -> dict:
    """The params tree as ShapeDtypeStructs (jax.eval_shape: nothing allocated)."""
    def init(b: dict[str, jax.ShapeDtypeStruct]) -> dict:
        return model.init(jax.random.key(0), b["input_ids"], b["segment_ids"],
                          b["input_mask"], b["masked_lm_positions"])

    return nn.unbox(jax.eval_shape(init, batch)["params"])


def time_compiles(model: nn.Module, batch_sizes: list[int]) -> tuple[float, float, float]:
    """Median (lower, compile) wall seconds and total process CPU seconds over fresh compiles,
    one per batch size. CPU time is the steadier number on a shared machine."""
    lower_times, compile_times, cpu_times = [], [], []
    for batch_size in batch_sizes:
        jax.clear_caches()
        batch = abstract_batch(batch_size)
        params = abstract_params(model, batch)
        start, start_cpu = time.perf_counter(), time.process_time()
        lowered = jax.jit(gradient_fn(model)).lower(params, batch)
        lowered_at = time.perf_counter()
        lowered.compile()
        compiled_at = time.perf_counter()
        cpu_times.append(time.process_time() - start_cpu)
        lower_times.append(lowered_at - start)
        compile_times.append(compiled_at - lowered_at)
    return (statistics.median(lower_times), statistics.median(compile_times),
            statistics.median(cpu_times))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="12,48",
                        help="comma-separated depths; the first is the base of the ratio")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2, help="batch size of the first repeat")
    args = parser.parse_args()
    # Compile times are measured: nothing may come from a persistent compilation cache
    # (JAX_COMPILATION_CACHE_DIR).
    jax.config.update("jax_enable_compilation_cache", False)
    depths = [int(depth) for depth in args.layers.split(",")]
    batch_sizes = [args.batch + repeat for repeat in range(args.repeats)]

    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; albert-base-v2 shape, "
          f"seq {SEQ_LEN}, {MAX_PREDICTIONS} masked positions, batch sizes {batch_sizes}; "
          f"median of {args.repeats} fresh compiles of jax.grad(MLM + SOP loss)\n")
    print(f"| model | L | lower (s) | compile (s) | total (s) | total / L={depths[0]} "
          f"| CPU (s) | CPU / L={depths[0]} |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = {}
    for name, model_class in (("scan", AlbertForPreTraining), ("loop", LoopAlbertForPreTraining)):
        base_total = base_cpu = None
        for depth in depths:
            model = model_class(get_config("albert-base-v2", num_hidden_layers=depth))
            # Same parameters as the scanned model: SPEC 7.2's 11,813,810 at every depth.
            assert parameter_count(model) == 11_813_810, (name, depth)
            lower_s, compile_s, cpu_s = time_compiles(model, batch_sizes)
            total = lower_s + compile_s
            base_total, base_cpu = base_total or total, base_cpu or cpu_s
            ratios[name, depth] = total / base_total
            print(f"| {name} | {depth} | {lower_s:.2f} | {compile_s:.2f} | {total:.2f} | "
                  f"{total / base_total:.2f}x | {cpu_s:.2f} | {cpu_s / base_cpu:.2f}x |",
                  flush=True)

    worst = max((ratios["scan", depth] for depth in depths[1:]), default=1.0)
    verdict = "OK" if worst <= MAX_SCAN_RATIO else "FAIL"
    print(f"\n{verdict}: scanned model's L={depths[-1]} / L={depths[0]} compile-time ratio "
          f"{ratios['scan', depths[-1]]:.2f}x (limit {MAX_SCAN_RATIO}x for every depth)")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
