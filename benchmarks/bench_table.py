"""The performance table (README's speed targets), every ratio from ONE process with the sides interleaved.

  .venv/bin/python -m benchmarks.bench_table [--json] [--repeats=5] [--steps=1]
      [--cases=train_base,train_small,infer_base,finetune,finetune_glue512,compile]

Each case builds its contenders (ours and HuggingFace Flax on the same inputs), compiles them,
runs one warm-up call each, then `--repeats` rounds of A, B, A, B ... (`--steps` calls per turn).
A ratio is HF seconds / our seconds inside one round; the table gives the median over rounds of
the step times and of the ratios, so slow phases of the shared machine hit both sides alike.
MFU (train, inference, fine-tuning) is taken the same way: the fp32 matmul ceiling (5 jitted
2048^3 dots, after 3 untimed ones) runs as one more contender in every round, and MFU is the
median over rounds of (model FLOPs / step seconds) / that round's ceiling.

Cases (the shapes of ../shared/peers, random weights, nothing downloaded):
  train_base   albert-base-v2 (E128 H768 L12), batch 8, seq 128, 20 masked positions: our train
               step with the reference LAMB (train/optim.py, clipping at 1.0) in fp32 and with
               bf16 compute, against FlaxAlbertForPreTraining + optax.lamb in fp32.
  train_small  H256, 4 heads, I1024, L6, batch 16: our fp32 LAMB step against HF Flax, and
               against HF PyTorch AlbertForPreTraining under torch.compile with AdamW (torch.optim
               has no LAMB), the fastest peer of ../shared/peers on this case.
  infer_base   forward only of the pretraining model, batch 32, seq 128 (ours: MLM logits at 20
               masked positions, as training computes them; HF: at all 128, as it only can).
  finetune     sequence classification (2 labels, classifier dropout 0.1), batch 8, seq 128:
               our fine-tuning step as `albert-jax finetune` runs it (configs/glue.py MRPC,
               MrpcTask, AdamW of SPEC 6.4 with clipping, train/step.py, state donated) against
               FlaxAlbertForSequenceClassification + optax.adamw.
  finetune_glue512
               GLUE as the reference runs it (seq_len 512, SPEC 8.2), batch 8, on 4 batches of
               pairs of 16-120 tokens (uniform): our step with the default length buckets
               (train/buckets.py: each batch at the bucket of its longest pair), our step
               padded to 512, HF Flax padded to 512. The same examples and results; the
               buckets skip the padding's work.
  compile      lower + compile time of the fp32 train step at L=12 and L=48 (ours and HF), and
               the temporary bytes with full remat at both depths.

With --topology=<TPU topology> (e.g. v5e:2x2; needs libtpu, nothing is timed): the compiler's
counts per device for the pretraining train step at seq 512 (batch 4 a chip) of ours with
attention_impl xla and splash, and of HF Flax (FlaxAlbertForPreTraining + optax.lamb), for
albert-base-v2 and albert-xxlarge-v2 in fp32 and bf16, each compiled ahead of time for the
topology's abstract devices (batch split over all of them, parameters replicated for HF,
our train state as the train loop shards it): FLOPs and bytes accessed from
`compiled.cost_analysis()`, temporaries from `compiled.memory_analysis()`. A Pallas kernel is a
custom call: XLA's cost analysis counts none of its FLOPs or bytes, so splash's rows lack the
attention matmuls and the scores' traffic (see RESULTS.md).

Peak memory: `compiled.memory_analysis()`: arguments + outputs + temporaries - donated aliases.
HuggingFace Flax comes from the optional `peers` extra (transformers<5), the PyTorch peer from
torch (the `interop` extra); without them the table says so and measures the rest. torch has no
ahead-of-time memory analysis: its peak is left blank.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from albert_jax import config as config_lib
from albert_jax import pretraining
from albert_jax.finetune.glue.task import MrpcTask
from albert_jax.model import get_config
from albert_jax.train import buckets, flops, optim, sharding
from albert_jax.train import state as state_lib
from albert_jax.train import step as step_lib
from configs import glue as glue_config

if TYPE_CHECKING:
    from albert_jax.model import ModelConfig

SEQ_LEN = 128
MAX_PREDICTIONS = 20
CASES = ("train_base", "train_small", "infer_base", "finetune", "finetune_glue512", "compile")
# ../shared/peers/common.py ALBERT_SMALL, in our config's field names.
SMALL_OVERRIDES = dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024,
                       num_hidden_layers=6)

try:
    import transformers
    from transformers import (
        AlbertConfig,
        FlaxAlbertForPreTraining,
        FlaxAlbertForSequenceClassification,
    )
    HF_MISSING = None
except ImportError as error:  # the optional `peers` extra
    HF_MISSING = (f"HuggingFace Flax not measured ({error}); install the `peers` extra: "
                  "pip install -e .[peers]")
try:
    import torch
    from transformers import AlbertForPreTraining
    TORCH_MISSING = None
except ImportError as error:  # the optional `interop` extra (torch) and `peers` (transformers)
    TORCH_MISSING = (f"HF PyTorch (torch.compile) not measured ({error}); install the `interop` "
                     "and `peers` extras: pip install -e .[interop,peers]")


@dataclasses.dataclass
class Contender:
    """One side of a comparison: a compiled step to call, and what compiling it cost.

    `run()` performs one step and blocks until its outputs are ready.
    """

    name: str
    run: Callable[[], None]
    compile_s: float
    peak_bytes: int | None  # None: not known ahead of time (torch)


def peak_bytes(compiled: Any) -> int:
    """Arguments + outputs + temporaries - donated (aliased) bytes of a compiled executable."""
    memory = compiled.memory_analysis()
    return int(memory.argument_size_in_bytes + memory.output_size_in_bytes
               + memory.temp_size_in_bytes - memory.alias_size_in_bytes)


def compile_timed(jitted: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - start


def matmul_ceiling(dtype: str = "float32", size: int = 2048, repeats: int = 7) -> float:
    """Median FLOP/s of a jitted [size, size] x [size, size] dot (fp32 accumulation)."""
    operand = jnp.ones((size, size), jnp.dtype(dtype))
    matmul = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    matmul(operand, operand).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(operand, operand).block_until_ready()
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / statistics.median(times)


CEILING = "fp32 matmul ceiling"
# The first dots after a model step run at 150-350 GFLOP/s, the following ones at 430-495 (the
# thread pool and caches warm up again; measured turn by turn): a turn warms up first, so the
# ceiling is the machine's, not the moment after a switch.
CEILING_SIZE, CEILING_WARMUP_CALLS, CEILING_CALLS = 2048, 3, 5


def ceiling_contender() -> tuple[Contender, list[float]]:
    """A turn of CEILING_WARMUP_CALLS untimed, then CEILING_CALLS timed jitted [2048, 2048]
    fp32 dots, run among a case's contenders so MFU divides by the ceiling of the same moments;
    each turn appends its timed FLOP/s to the returned list."""
    operand = jnp.ones((CEILING_SIZE, CEILING_SIZE), jnp.float32)
    matmul = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    compiled, compile_s = compile_timed(matmul, operand, operand)
    readings: list[float] = []

    def run() -> None:
        for _ in range(CEILING_WARMUP_CALLS):
            compiled(operand, operand).block_until_ready()
        start = time.perf_counter()
        for _ in range(CEILING_CALLS):
            compiled(operand, operand).block_until_ready()
        readings.append(CEILING_CALLS * 2.0 * CEILING_SIZE**3 / (time.perf_counter() - start))

    return Contender(CEILING, run, compile_s, peak_bytes(compiled)), readings


def interleave(contenders: list[Contender], repeats: int, steps: int) -> dict[str, list[float]]:
    """Seconds per step of each contender in each round; rounds run A, B, A, B, ..."""
    for contender in contenders:  # warm-up: first-call allocations, page faults
        contender.run()
    times: dict[str, list[float]] = {contender.name: [] for contender in contenders}
    for _ in range(repeats):
        for contender in contenders:
            start = time.perf_counter()
            for _ in range(steps):
                contender.run()
            times[contender.name].append((time.perf_counter() - start) / steps)
    return times


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator / denominator, each ratio taken inside one round."""
    return statistics.median(a / b for a, b in zip(numerator, denominator))


# ---------------------------------------------------------------------------------------------
# Inputs.


def pretraining_batch(batch: int, vocab: int, seed: int = 0,
                      seq_len: int = SEQ_LEN) -> dict[str, np.ndarray]:
    """Our features: full-length sequences, MAX_PREDICTIONS masked positions each."""
    rng = np.random.default_rng(seed)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len - 1), MAX_PREDICTIONS,
                                             replace=False) for _ in range(batch)]), axis=1)
    return {
        "input_ids": rng.integers(5, vocab, (batch, seq_len)).astype(np.int32),
        "input_mask": np.ones((batch, seq_len), np.int32),
        "segment_ids": (np.arange(seq_len)[None] >= seq_len // 2).repeat(batch, 0).astype(np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": rng.integers(5, vocab, (batch, MAX_PREDICTIONS)).astype(np.int32),
        "masked_lm_weights": np.ones((batch, MAX_PREDICTIONS), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


def hf_pretraining_batch(ours: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same examples in HF's form: labels [batch, seq] with -100 where nothing is masked."""
    labels = np.full(ours["input_ids"].shape, -100, np.int32)
    np.put_along_axis(labels, ours["masked_lm_positions"], ours["masked_lm_ids"], axis=1)
    return {"input_ids": ours["input_ids"], "token_type_ids": ours["segment_ids"],
            "attention_mask": ours["input_mask"], "labels": labels,
            "sentence_order_label": ours["next_sentence_labels"][:, 0]}


def hf_config(model_config: ModelConfig, **overrides: Any) -> Any:
    """HF's AlbertConfig of our model config (tanh GELU = HF "gelu_new", SPEC 11)."""
    return AlbertConfig(
        vocab_size=model_config.vocab_size, embedding_size=model_config.embedding_size,
        hidden_size=model_config.hidden_size, num_hidden_layers=model_config.num_hidden_layers,
        num_attention_heads=model_config.num_attention_heads,
        intermediate_size=model_config.intermediate_size, hidden_act="gelu_new",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=model_config.max_position_embeddings,
        type_vocab_size=model_config.type_vocab_size, layer_norm_eps=model_config.layer_norm_eps,
        **overrides)


# ---------------------------------------------------------------------------------------------
# Our steps.


def _lamb_config() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(
        name="lamb", lr=1e-4, warmup_steps=10, schedule="reference", power=1.0,
        weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0))


def _single_device_mesh() -> jax.sharding.Mesh:
    return sharding.make_mesh(ml_collections.ConfigDict(dict(data=1, fsdp=1, tensor=1)),
                              devices=jax.devices()[:1])


def ours_train(name: str, model_config: ModelConfig, batch: int) -> Contender:
    """Our pretraining step (train/step.py) with the reference LAMB, params donated."""
    run_config = ml_collections.ConfigDict(dict(
        seq_len=SEQ_LEN, init_from="",
        data=dict(max_predictions=MAX_PREDICTIONS, sentence_objective="sop")))
    task = pretraining.PretrainingTask(run_config, model_config)
    optimizer, lr_fn = optim.make_optimizer(_lamb_config(), total_steps=1000)
    state = state_lib.init_train_state(task.model, optimizer, _single_device_mesh(),
                                       jax.random.PRNGKey(0), task.init_inputs())
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn), donate_argnums=(0,))
    inputs = jax.device_put(pretraining_batch(batch, model_config.vocab_size))
    rng = jax.random.PRNGKey(1)
    compiled, compile_s = compile_timed(train_step, state, inputs, rng)
    holder = {"state": state}

    def run() -> None:
        holder["state"], metrics = compiled(holder["state"], inputs, rng)
        jax.block_until_ready(metrics)

    return Contender(name, run, compile_s, peak_bytes(compiled))


def ours_forward(name: str, model_config: ModelConfig, batch: int) -> Contender:
    """Our pretraining model's forward (deterministic): MLM logits at the masked positions."""
    run_config = ml_collections.ConfigDict(dict(
        seq_len=SEQ_LEN, init_from="",
        data=dict(max_predictions=MAX_PREDICTIONS, sentence_objective="sop")))
    task = pretraining.PretrainingTask(run_config, model_config)
    params = task.model.init(jax.random.PRNGKey(0), *task.init_inputs())["params"]
    params = jax.tree.map(jnp.asarray, sharding.unbox(params))
    inputs = jax.device_put(pretraining_batch(batch, model_config.vocab_size))
    forward = jax.jit(lambda p, b: task.apply(p, b, train=False, rng=None))
    compiled, compile_s = compile_timed(forward, params, inputs)
    return Contender(name, lambda: jax.block_until_ready(compiled(params, inputs)), compile_s,
                     peak_bytes(compiled))


def glue_batches(batch: int, seq_len: int, lengths: tuple[int, int], count: int, vocab: int,
                 seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` GLUE batches in our features' form ([batch, seq_len], padded as the reference
    pads): each example a pair [CLS] a [SEP] b [SEP] of a length drawn uniformly from
    `lengths` (inclusive), random token ids, random labels of 2 classes."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        real = rng.integers(lengths[0], lengths[1] + 1, batch)
        positions = np.arange(seq_len)[None]
        mask = (positions < real[:, None]).astype(np.int32)
        second = (positions >= (real // 2)[:, None]).astype(np.int32) * mask
        token_ids = rng.integers(5, vocab, (batch, seq_len)).astype(np.int32)
        batches.append({"input_ids": token_ids * mask,
                        "segment_ids": second, "input_mask": mask,
                        "labels": rng.integers(0, 2, batch).astype(np.int32),
                        "example_weight": np.ones(batch, np.float32)})
    return batches


def full_length_batch(batch: int, vocab: int) -> list[dict[str, np.ndarray]]:
    """One GLUE batch whose pairs are all SEQ_LEN tokens: the same work for every contender."""
    return glue_batches(batch, SEQ_LEN, (SEQ_LEN, SEQ_LEN), 1, vocab)


def ours_finetune(name: str, model_config: ModelConfig, host_batches: list[dict[str, np.ndarray]],
                  length_buckets: tuple[int, ...] = ()) -> Contender:
    """The fine-tuning path of `albert-jax finetune`: configs/glue.py (MRPC, 2 labels, backbone
    dropout 0, classifier dropout 0.1), MrpcTask, AdamW with clipping from `make_optimizer`
    (SPEC 6.4), train/step.py's step with the state donated, as train/loop.py jits it, each
    batch cut to its length bucket (train/buckets.py) as the loop does. One call = one step on
    the next of `host_batches` (in turn); every bucket's step is compiled ahead."""
    batch, seq_len = host_batches[0]["input_ids"].shape
    config = glue_config.get_config("task=mrpc")
    config.seq_len, config.batch_size, config.length_buckets = seq_len, batch, length_buckets
    config.compute_dtype = model_config.dtype
    task = MrpcTask(config, config_lib.model_config(config, model_config), tokenizer=None,
                    pretrained=None)
    optimizer, lr_fn = optim.make_optimizer(config.optim, config.total_steps)
    mesh = _single_device_mesh()
    state = state_lib.init_train_state(task.model, optimizer, mesh, jax.random.PRNGKey(0),
                                       task.init_inputs())
    train_step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn, mesh=mesh),
                         donate_argnums=(0,))
    lengths = buckets.lengths_of(config)
    features = [jax.device_put(buckets.trim(host_batch, task.sequence_fields, lengths))
                for host_batch in host_batches]
    rng = jax.random.PRNGKey(1)
    compiled_by_length, compile_s = {}, 0.0
    for batch_features in features:
        length = batch_features["input_ids"].shape[-1]
        if length not in compiled_by_length:
            compiled_by_length[length], seconds = compile_timed(train_step, state,
                                                                batch_features, rng)
            compile_s += seconds
    holder = {"state": state, "calls": 0}

    def run() -> None:
        batch_features = features[holder["calls"] % len(features)]
        holder["calls"] += 1
        compiled = compiled_by_length[batch_features["input_ids"].shape[-1]]
        holder["state"], metrics = compiled(holder["state"], batch_features, rng)
        jax.block_until_ready(metrics)

    return Contender(name, run, compile_s,
                     max(peak_bytes(compiled) for compiled in compiled_by_length.values()))


# ---------------------------------------------------------------------------------------------
# HuggingFace Flax steps (the ../shared/peers/bench_hf_flax.py step, in this process).


def _train_step(loss_fn: Callable, optimizer: optax.GradientTransformation) -> Callable:
    """(params, opt_state, batch, rng) -> (params, opt_state, loss, rng): one plain optax step
    of `loss_fn(params, batch, dropout_rng)`, as ../shared/peers/bench_hf_flax.py runs HF."""
    def train_step(params, opt_state, batch, rng):
        rng, dropout_rng = jax.random.split(rng)
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, dropout_rng)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, rng
    return train_step


def _donating_contender(name: str, train_step: Callable, params: Any, opt_state: Any,
                        batches: list[dict[str, Any]]) -> Contender:
    """A (params, opt_state, batch, rng) -> (params, opt_state, loss, rng) step, donated; one
    call = one step on the next of `batches` (of one shape), in turn."""
    jitted = jax.jit(train_step, donate_argnums=(0, 1))
    rng = jax.random.PRNGKey(0)
    compiled, compile_s = compile_timed(jitted, params, opt_state, batches[0], rng)
    holder = {"params": params, "opt_state": opt_state, "rng": rng, "calls": 0}

    def run() -> None:
        batch = batches[holder["calls"] % len(batches)]
        holder["calls"] += 1
        holder["params"], holder["opt_state"], loss, holder["rng"] = compiled(
            holder["params"], holder["opt_state"], batch, holder["rng"])
        loss.block_until_ready()

    return Contender(name, run, compile_s, peak_bytes(compiled))


def hf_pretraining_loss(model: Any) -> Callable:
    """(params, batch, dropout_rng) -> loss of FlaxAlbertForPreTraining: MLM CE over all
    positions with -100 ignored, plus SOP."""
    def loss_fn(params, batch, rng):
        out = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], params=params, dropout_rng=rng,
                    train=True)
        labels = batch["labels"]
        weights = (labels != -100).astype(jnp.float32)
        log_probs = jax.nn.log_softmax(out.prediction_logits.astype(jnp.float32), axis=-1)
        nll = -jnp.take_along_axis(log_probs, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
        sop = optax.softmax_cross_entropy_with_integer_labels(
            out.sop_logits.astype(jnp.float32), batch["sentence_order_label"]).mean()
        return (nll * weights).sum() / weights.sum() + sop
    return loss_fn


def hf_train(name: str, model_config: ModelConfig, batch: int) -> Contender:
    """FlaxAlbertForPreTraining + optax.lamb: MLM CE over all positions with -100 ignored."""
    model = FlaxAlbertForPreTraining(hf_config(model_config), input_shape=(1, SEQ_LEN), seed=0)
    data = {key: jnp.asarray(value) for key, value in
            hf_pretraining_batch(pretraining_batch(batch, model_config.vocab_size)).items()}
    optimizer = optax.lamb(1e-4, weight_decay=0.01)
    params = model.params
    return _donating_contender(name, _train_step(hf_pretraining_loss(model), optimizer), params,
                               optimizer.init(params), [data])


def hf_torch_train(name: str, model_config: ModelConfig, batch: int, *, seq_len: int = SEQ_LEN,
                   device: str = "cpu", autocast_dtype: Any = None, compile_backend: str | None
                   = "inductor") -> Contender:
    """AlbertForPreTraining (PyTorch) + torch.optim.AdamW, the step of
    ../shared/peers/bench_hf_torch.py: HF's own MLM (every position, -100 ignored) + SOP loss,
    backward, optimizer step; under torch.compile with `compile_backend` (None: eager), in
    torch.autocast to `autocast_dtype` if given, on `device`. Compile time is that of the
    first call (inductor's, under torch.compile)."""
    torch.manual_seed(0)
    model = AlbertForPreTraining(hf_config(model_config)).to(device)
    model.train()
    data = {key: torch.from_numpy(value.astype(np.int64)).to(device) for key, value in
            hf_pretraining_batch(pretraining_batch(batch, model_config.vocab_size,
                                                   seq_len=seq_len)).items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    forward = model if compile_backend is None else torch.compile(model,
                                                                  backend=compile_backend)
    autocast = functools.partial(torch.autocast, torch.device(device).type,
                                 dtype=autocast_dtype, enabled=autocast_dtype is not None)

    def run() -> None:
        with autocast():
            loss = forward(**data).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    start = time.perf_counter()
    run()
    return Contender(name, run, time.perf_counter() - start, None)


def hf_forward(name: str, model_config: ModelConfig, batch: int) -> Contender:
    model = FlaxAlbertForPreTraining(hf_config(model_config), input_shape=(1, SEQ_LEN), seed=0)
    data = {key: jnp.asarray(value) for key, value in
            hf_pretraining_batch(pretraining_batch(batch, model_config.vocab_size)).items()}

    def forward(params, batch):
        out = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], params=params, train=False)
        return out.prediction_logits, out.sop_logits

    params = model.params
    compiled, compile_s = compile_timed(jax.jit(forward), params, data)
    return Contender(name, lambda: jax.block_until_ready(compiled(params, data)), compile_s,
                     peak_bytes(compiled))


def hf_finetune(name: str, model_config: ModelConfig,
                host_batches: list[dict[str, np.ndarray]]) -> Contender:
    """FlaxAlbertForSequenceClassification + optax.adamw on `host_batches` (our features'
    form) at their padded length, one call a batch in turn."""
    seq_len = host_batches[0]["input_ids"].shape[1]
    model = FlaxAlbertForSequenceClassification(
        hf_config(model_config, classifier_dropout_prob=0.1, num_labels=2),
        input_shape=(1, seq_len), seed=0)
    data = [{"input_ids": jnp.asarray(inputs["input_ids"]),
             "token_type_ids": jnp.asarray(inputs["segment_ids"]),
             "attention_mask": jnp.asarray(inputs["input_mask"]),
             "labels": jnp.asarray(inputs["labels"])} for inputs in host_batches]
    optimizer = optax.adamw(1e-4, weight_decay=0.01)

    def loss_fn(params, batch, rng):
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"], params=params, dropout_rng=rng,
                       train=True).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()

    params = model.params
    return _donating_contender(name, _train_step(hf_pretraining_loss(model), optimizer), params,
                               optimizer.init(params), data)


# ---------------------------------------------------------------------------------------------
# Cases. Each returns rows: dicts with "case", "contender" and whatever it measured.


def _speed_rows(case: str, contenders: list[Contender], repeats: int, steps: int,
                baseline: str | None, flops_per_step: dict[str, float],
                peers: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Interleaved timings of `contenders`; for those in `flops_per_step`, MFU per round
    against the fp32 matmul ceiling timed in the same round (median over rounds). Ours (the
    contenders with FLOPs) also get the ratio to the fastest of `peers` (by median step)."""
    ceiling, readings = ceiling_contender()
    times = interleave(contenders + [ceiling], repeats, steps)
    rounds = readings[1:]  # interleave's warm-up turn first, then `steps` turns a round
    ceilings = [statistics.median(rounds[index * steps:(index + 1) * steps])
                for index in range(repeats)]
    rows = []
    for contender in contenders:
        step_s = statistics.median(times[contender.name])
        row = {"case": case, "contender": contender.name, "step_s": step_s,
               "spread": (max(times[contender.name]) - min(times[contender.name])) / step_s,
               "compile_s": contender.compile_s}
        if contender.peak_bytes is not None:
            row["peak_mib"] = contender.peak_bytes / 2**20
        if baseline is not None and contender.name != baseline:
            row["speedup_vs_hf"] = median_ratio(times[baseline], times[contender.name])
        if peers and contender.name in flops_per_step:
            best_peer = min(peers, key=lambda peer: statistics.median(times[peer]))
            row["best_peer"] = best_peer
            row["speedup_vs_best_peer"] = median_ratio(times[best_peer], times[contender.name])
        if contender.name in flops_per_step:
            row["gflop_per_step"] = flops_per_step[contender.name] / 1e9
            row["ceiling_gflops"] = statistics.median(ceilings) / 1e9
            row["mfu_fp32"] = statistics.median(
                flops_per_step[contender.name] / seconds / peak
                for seconds, peak in zip(times[contender.name], ceilings))
        rows.append(row)
    return rows


def train_case(case: str, model_config: ModelConfig, batch: int, repeats: int,
               steps: int, with_bf16: bool, with_torch: bool) -> list[dict[str, Any]]:
    contenders = [ours_train("ours fp32 LAMB", model_config, batch)]
    if with_bf16:
        bf16 = get_config("albert-base-v2", **dict(model_config.to_dict(), dtype="bfloat16"))
        contenders.append(ours_train("ours bf16 LAMB", bf16, batch))
    if HF_MISSING is None:
        contenders.append(hf_train("HF Flax fp32 optax.lamb", model_config, batch))
    if with_torch and TORCH_MISSING is None:
        contenders.append(hf_torch_train("HF torch.compile fp32 AdamW", model_config, batch))
    train_flops = flops.train_flops_per_step(model_config, batch, SEQ_LEN, MAX_PREDICTIONS)
    peers = tuple(c.name for c in contenders if c.name.startswith("HF"))
    return _speed_rows(case, contenders, repeats, steps,
                       None if HF_MISSING else "HF Flax fp32 optax.lamb",
                       {c.name: train_flops for c in contenders if c.name.startswith("ours")},
                       peers=peers if with_torch else ())


def infer_case(model_config: ModelConfig, repeats: int, steps: int) -> list[dict[str, Any]]:
    batch = 32
    contenders = [ours_forward("ours fp32 forward", model_config, batch)]
    if HF_MISSING is None:
        contenders.append(hf_forward("HF Flax fp32 forward", model_config, batch))
    forward_flops = batch * flops.forward_flops_per_sequence(model_config, SEQ_LEN,
                                                             MAX_PREDICTIONS)
    return _speed_rows("infer_base", contenders, repeats, steps,
                       None if HF_MISSING else "HF Flax fp32 forward",
                       {"ours fp32 forward": forward_flops})


def finetune_case(model_config: ModelConfig, repeats: int, steps: int) -> list[dict[str, Any]]:
    batch = 8
    full = full_length_batch(batch, model_config.vocab_size)
    contenders = [ours_finetune("ours fp32 AdamW", model_config, full)]
    if HF_MISSING is None:
        contenders.append(hf_finetune("HF Flax fp32 optax.adamw", model_config, full))
    # The backbone at every position, no masked-LM head (FinetuneTask.flops_per_example).
    finetune_flops = (flops.TRAIN_FLOPS_PER_FORWARD * batch
                      * flops.forward_flops_per_sequence(model_config, SEQ_LEN, 0))
    return _speed_rows("finetune", contenders, repeats, steps,
                       None if HF_MISSING else "HF Flax fp32 optax.adamw",
                       {"ours fp32 AdamW": finetune_flops})


GLUE_SEQ_LEN = 512  # SPEC 8.2: the reference's max_seq_length for GLUE
GLUE_LENGTHS = (16, 120)  # tokens per pair, uniform: short pairs, all in the 128 bucket


def finetune_lengths_case(model_config: ModelConfig, repeats: int,
                          steps: int) -> list[dict[str, Any]]:
    """GLUE as the reference runs it (seq_len 512, batch 8) on 4 batches of pairs of 16-120
    tokens: ours with the default length buckets (each batch at the bucket of its longest pair,
    128 here), ours padded to 512 (`length_buckets=()`), HF Flax padded to 512."""
    batch = 8
    batches = glue_batches(batch, GLUE_SEQ_LEN, GLUE_LENGTHS, 4, model_config.vocab_size)
    default_buckets = glue_config.get_config("task=mrpc").length_buckets
    contenders = [ours_finetune("ours fp32 AdamW, length buckets", model_config, batches,
                                default_buckets),
                  ours_finetune("ours fp32 AdamW, padded to 512", model_config, batches)]
    if HF_MISSING is None:
        contenders.append(hf_finetune("HF Flax fp32 optax.adamw, padded to 512", model_config,
                                      batches))
    # No MFU here: these 7 GiB steps evict the ceiling's working set, which then reads low.
    return _speed_rows("finetune_glue512", contenders, repeats, steps,
                       None if HF_MISSING else "HF Flax fp32 optax.adamw, padded to 512", {})


def compile_case() -> list[dict[str, Any]]:
    """Compile seconds of the fp32 train step (batch 8) at L=12 and L=48; remat temp bytes."""
    rows = []
    builders = [("ours", ours_train)] + ([("HF Flax", hf_train)] if HF_MISSING is None else [])
    for label, build in builders:
        seconds = {}
        for layers in (12, 48):
            contender = build(label, get_config("albert-base-v2", num_hidden_layers=layers), 8)
            seconds[layers] = contender.compile_s
            rows.append({"case": "compile", "contender": f"{label} L={layers}",
                         "compile_s": contender.compile_s,
                         "peak_mib": contender.peak_bytes / 2**20})
            del contender
        rows[-1]["compile_ratio_48_12"] = seconds[48] / seconds[12]
    temp = {}
    for layers in (12, 48):
        config = get_config("albert-base-v2", num_hidden_layers=layers, remat_policy="full")
        contender = ours_train(f"ours remat=full L={layers}", config, 8)
        rows.append({"case": "compile", "contender": contender.name,
                     "compile_s": contender.compile_s, "peak_mib": contender.peak_bytes / 2**20})
        temp[layers] = contender.peak_bytes
    rows[-1]["peak_ratio_48_12"] = temp[48] / temp[12]
    return rows


def run_cases(cases: list[str], repeats: int, steps: int) -> dict[str, Any]:
    ceiling = matmul_ceiling("float32")
    base = get_config("albert-base-v2")
    rows: list[dict[str, Any]] = []
    for case in cases:
        if case == "train_base":
            rows += train_case(case, base, 8, repeats, steps, with_bf16=True,
                               with_torch=False)
        elif case == "train_small":
            small = get_config("albert-base-v2", **SMALL_OVERRIDES)
            rows += train_case(case, small, 16, repeats, steps, with_bf16=False,
                               with_torch=True)
        elif case == "infer_base":
            rows += infer_case(base, repeats, steps)
        elif case == "finetune":
            rows += finetune_case(base, repeats, steps)
        elif case == "finetune_glue512":
            rows += finetune_lengths_case(base, repeats, steps)
        elif case == "compile":
            rows += compile_case()
        print(f"[{case} done]", file=sys.stderr, flush=True)
    return {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                   f"{jax.devices()[0].device_kind}",
        "versions": {"jax": jax.__version__,
                     "transformers": None if HF_MISSING else transformers.__version__,
                     "torch": None if TORCH_MISSING else torch.__version__},
        "hf_note": HF_MISSING,
        "torch_note": TORCH_MISSING if "train_small" in cases else None,
        "fp32_matmul_ceiling_gflops": ceiling / 1e9,
        "repeats": repeats, "steps_per_repeat": steps,
        "command": " ".join([os.path.basename(sys.executable), "-m", "benchmarks.bench_table"]
                            + sys.argv[1:]),
        "rows": rows,
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"machine: {result['machine']}; jax {result['versions']['jax']}, transformers "
          f"{result['versions']['transformers']}, torch {result['versions']['torch']}")
    print(f"command: {result['command']}")
    print(f"fp32 matmul ceiling (2048^3) at the start: {result['fp32_matmul_ceiling_gflops']:.0f} "
          f"GFLOP/s; {result['repeats']} interleaved rounds of {result['steps_per_repeat']} "
          "step(s), medians; mfu_fp32 per round against the ceiling_gflops timed in that round")
    for note in (result["hf_note"], result["torch_note"]):
        if note:
            print(f"NOTE: {note}")
    columns = [("case", "{}"), ("contender", "{}"), ("step_s", "{:.3f}"),
               ("speedup_vs_hf", "{:.2f}x"), ("speedup_vs_best_peer", "{:.2f}x"),
               ("mfu_fp32", "{:.1%}"),
               ("ceiling_gflops", "{:.0f}"), ("spread", "{:.0%}"),
               ("compile_s", "{:.1f}"), ("compile_ratio_48_12", "{:.2f}x"),
               ("peak_mib", "{:,.0f}"), ("peak_ratio_48_12", "{:.2f}x")]
    print("| " + " | ".join(name for name, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for row in result["rows"]:
        cells = [fmt.format(row[name]) if name in row else "" for name, fmt in columns]
        print("| " + " | ".join(cells) + " |")


TOPOLOGY_SEQ_LEN, TOPOLOGY_BATCH_PER_DEVICE = 512, 4


def _compiler_counts(compiled: Any) -> dict[str, float]:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return {"flops": cost.get("flops", 0.0), "bytes_accessed": cost.get("bytes accessed", 0.0),
            "temp_bytes": compiled.memory_analysis().temp_size_in_bytes}


def ours_compiled_for(model_config: ModelConfig, mesh: jax.sharding.Mesh, batch: int) -> Any:
    """Our pretraining train step (LAMB) compiled for `mesh` as train/plan.py compiles it."""
    run_config = ml_collections.ConfigDict(dict(
        seq_len=TOPOLOGY_SEQ_LEN, init_from="",
        data=dict(max_predictions=MAX_PREDICTIONS, sentence_objective="sop")))
    task = pretraining.PretrainingTask(run_config, model_config)
    optimizer, lr_fn = optim.make_optimizer(_lamb_config(), total_steps=1000)
    state, state_shardings = state_lib.abstract_train_state(task.model, optimizer, mesh,
                                                            task.init_inputs())
    batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    example = pretraining_batch(1, model_config.vocab_size, seq_len=TOPOLOGY_SEQ_LEN)
    features = {name: jax.ShapeDtypeStruct((batch, *value.shape[1:]), value.dtype,
                                           sharding=batch_sharding)
                for name, value in example.items()}
    rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
    step = jax.jit(step_lib.make_train_step(task, optimizer, lr_fn, mesh=mesh),
                   in_shardings=(state_shardings, batch_sharding, replicated),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))
    return step.lower(state, features, rng).compile()


def hf_compiled_for(model_config: ModelConfig, mesh: jax.sharding.Mesh, batch: int) -> Any:
    """HF Flax's pretraining step (hf_train's), batch split over `mesh`, params replicated."""
    hf_model = FlaxAlbertForPreTraining(
        hf_config(model_config), input_shape=(1, TOPOLOGY_SEQ_LEN), seed=0, _do_init=False,
        dtype=model_config.compute_dtype)
    optimizer = optax.lamb(1e-4, weight_decay=0.01)
    params = jax.eval_shape(lambda: hf_model.init_weights(jax.random.PRNGKey(0),
                                                           (1, TOPOLOGY_SEQ_LEN)))
    opt_state = jax.eval_shape(optimizer.init, params)
    batch_sharding, replicated = sharding.batch_sharding(mesh), sharding.replicated(mesh)
    place = lambda tree, where: jax.tree.map(  # noqa: E731
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=where), tree)
    example = hf_pretraining_batch(
        pretraining_batch(1, model_config.vocab_size, seq_len=TOPOLOGY_SEQ_LEN))
    data = {name: jax.ShapeDtypeStruct((batch, *np.shape(value)[1:]), np.asarray(value).dtype,
                                       sharding=batch_sharding)
            for name, value in example.items()}
    rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
    step = jax.jit(_train_step(hf_pretraining_loss(hf_model), optimizer), donate_argnums=(0, 1))
    return step.lower(place(params, replicated), place(opt_state, replicated), data,
                      rng).compile()


TOPOLOGY_PRESETS, TOPOLOGY_DTYPES = ("albert-base-v2", "albert-xxlarge-v2"), ("float32", "bfloat16")


def topology_counts(topology: str, presets: list[str], dtypes: list[str]) -> dict[str, Any]:
    """The compiler's per-device counts of every contender on `topology` (module doc)."""
    from albert_jax.train import plan  # libtpu's abstract devices
    target = plan.tpu_target(topology)
    mesh = sharding.make_mesh(ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1)),
                              devices=list(target.devices))
    batch = TOPOLOGY_BATCH_PER_DEVICE * len(target.devices)
    rows = []
    for preset in presets:
        for dtype in dtypes:
            contenders = [(f"ours {impl}", functools.partial(
                ours_compiled_for, get_config(preset, dtype=dtype, attention_impl=impl)))
                for impl in ("xla", "splash")]
            if not HF_MISSING:
                contenders.append(("HF Flax", functools.partial(
                    hf_compiled_for, get_config(preset, dtype=dtype))))
            for name, compile_for in contenders:
                started = time.perf_counter()
                try:
                    counts = _compiler_counts(compile_for(mesh, batch))
                except jax.errors.JaxRuntimeError as error:  # refused: does not fit
                    counts = {"error": str(error).splitlines()[0][:200]}
                rows.append({"model": preset, "dtype": dtype, "contender": name,
                             "compile_s": time.perf_counter() - started, **counts})
                print(f"[{preset} {dtype} {name}: {rows[-1]}]", file=sys.stderr, flush=True)
    return {"topology": topology, "devices": len(target.devices),
            "device_kind": target.devices[0].device_kind, "batch": batch,
            "seq_len": TOPOLOGY_SEQ_LEN, "hf_note": HF_MISSING, "rows": rows,
            "command": " ".join([os.path.basename(sys.executable), "-m",
                                 "benchmarks.bench_table"] + sys.argv[1:])}


def print_topology_table(result: dict[str, Any]) -> None:
    print(f"{result['devices']} x {result['device_kind']} ({result['topology']}), batch "
          f"{result['batch']} x {result['seq_len']}, per device, from the TPU compiler; "
          f"command: {result['command']}")
    if result["hf_note"]:
        print(f"NOTE: {result['hf_note']}")
    print("| model | dtype | contender | GFLOPs | GB accessed | temporaries GiB |")
    print("|---|---|---|---|---|---|")
    for row in result["rows"]:
        if "error" in row:
            cells = ["refused: " + row["error"], "", ""]
        else:
            cells = [f"{row['flops'] / 1e9:,.0f}", f"{row['bytes_accessed'] / 1e9:,.1f}",
                     f"{row['temp_bytes'] / 1024**3:.2f}"]
        print("| " + " | ".join([row["model"], row["dtype"], row["contender"], *cells]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1, help="steps per contender per round")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--topology", default="",
                        help="a TPU topology (e.g. v5e:2x2): the compiler's counts, no timing")
    parser.add_argument("--topology_presets", default=",".join(TOPOLOGY_PRESETS))
    parser.add_argument("--topology_dtypes", default=",".join(TOPOLOGY_DTYPES))
    args = parser.parse_args()
    if args.topology:
        result = topology_counts(args.topology, args.topology_presets.split(","),
                                 args.topology_dtypes.split(","))
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print_topology_table(result)
        return
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {CASES}")
    # Compile times are measured: nothing may come from a persistent compilation cache
    # (JAX_COMPILATION_CACHE_DIR).
    jax.config.update("jax_enable_compilation_cache", False)
    result = run_cases(cases, args.repeats, args.steps)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
