"""What a job hands the training loop: the task interface (after T5X's BaseModel and big_vision's
evaluators).

The loop (train/loop.py) owns everything that does not depend on the job: the mesh and
shardings, jit, gradient accumulation, dtype, checkpoints and exact resume, preemption, the NaN
guard, progress, metrics files and keeping the best checkpoint. A task owns what does: its model
and init inputs, how its batch keys meet the model's arguments, its loss as sums over examples,
its data, its eval metrics and what picks the best checkpoint, and the console line.

Losses are sums so that gradient accumulation stays exact: `loss_sums` adds over the examples of
a (micro)batch, `denominators` is taken over the WHOLE batch before it is split, and `loss`
divides the one by the other, so the microbatch losses add up to the whole batch's loss.
Evaluation is the same: sums over every eval batch, plus per-example `predictions` gathered to
the host for metrics that are not sums (MCC, Spearman, SQuAD spans). Eval batches carry
`example_weight` (0 for the padding of the last batch) so every example is scored exactly once.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Any, Iterator, Mapping

import flax.linen as nn
import jax
import numpy as np

from albert_jax.model import ModelConfig

Batch = dict[str, jax.Array]
HostBatch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Selection:
    """How the best checkpoint is chosen: the largest `metric` on eval split `split`."""

    split: str
    metric: str


class Task(abc.ABC):
    """One job for the loop: pretraining, a GLUE task, RACE, SQuAD.

    Attributes:
      model: the Flax module trained (its params are the `params` of the train state).
      model_config: the model config `model` was built from (saved with every checkpoint).
      eval_splits: names of the splits `eval_batches` serves, evaluated in this order.
      selection: what picks the best checkpoint, or None to keep none (pretraining).
    """

    model: nn.Module
    model_config: ModelConfig
    eval_splits: tuple[str, ...] = ()
    selection: Selection | None = None
    # Fields cut along their last axis to the length bucket of each batch (train/buckets.py);
    # none: every batch runs at seq_len.
    sequence_fields: tuple[str, ...] = ()

    # --- Model -----------------------------------------------------------------------------
    @abc.abstractmethod
    def init_inputs(self) -> tuple[jax.Array, ...]:
        """The positional inputs of `model.init`, batch 1 (only their shapes matter)."""

    @abc.abstractmethod
    def apply(self, params: Any, batch: Batch, *, train: bool, rng: jax.Array | None) -> Any:
        """The model's outputs on `batch`: the one place where batch keys meet model arguments.
        `rng` is the dropout key when `train`."""

    def initial_params(self, params: Any) -> Any:
        """The params a new run starts from, given the freshly initialised ones (sharded
        jax.Arrays): e.g. weights from `config.init_from` in place of some of them."""
        return params

    # --- Loss ----------------------------------------------------------------------------
    @abc.abstractmethod
    def loss_sums(self, outputs: Any, batch: Batch) -> dict[str, jax.Array]:
        """Float32 scalars that add over examples (losses, correct counts, weights)."""

    @abc.abstractmethod
    def denominators(self, batch: Batch) -> dict[str, jax.Array]:
        """What the loss sums are divided by, taken over the whole batch (not a microbatch)."""

    @abc.abstractmethod
    def loss(self, sums: dict[str, jax.Array], denominators: dict[str, jax.Array]) -> jax.Array:
        """The scalar training loss from (microbatch) `sums` and whole-batch `denominators`."""

    @abc.abstractmethod
    def metrics_from_sums(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Training metrics (at least `loss`) from the sums of a whole batch."""

    def predictions(self, outputs: Any, batch: Batch) -> dict[str, jax.Array]:
        """Per-example arrays [batch, ...] gathered to the host during evaluation (none by
        default); `example_weight` of the batch is added by the loop."""
        del outputs, batch
        return {}

    # --- Data ----------------------------------------------------------------------------
    @abc.abstractmethod
    def train_iterator(self) -> Any:
        """This host's training batches, forever: an iterator with `get_state`/`set_state`
        (a grain DatasetIterator) so a resumed run sees the batches it would have seen."""

    @abc.abstractmethod
    def train_batch_spec(self, batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
        """The global train batch of `batch_size` examples as shapes and dtypes, every key the
        train iterator yields: what the planner compiles the step for without reading data."""

    @abc.abstractmethod
    def eval_batches(self, split: str) -> Iterator[HostBatch]:
        """One pass over this host's rows of eval split `split` (a finite iterator)."""

    # --- Evaluation ------------------------------------------------------------------------
    @abc.abstractmethod
    def eval_metrics(self, split: str, sums: dict[str, np.ndarray],
                     predictions: dict[str, np.ndarray]) -> dict[str, float]:
        """The metrics of a whole eval split from its summed `sums` and the concatenated
        per-example `predictions` (padding rows, `example_weight` 0, included)."""

    # --- Reporting -------------------------------------------------------------------------
    @abc.abstractmethod
    def console_line(self, metrics: Mapping[str, float]) -> list[str]:
        """The task's part of a console progress line, e.g. ["loss 2.31", "acc 0.51"]."""

    def workdir_files(self) -> dict[str, bytes]:
        """Files the run keeps in its workdir beside the checkpoints, e.g. its tokenizer, so the
        workdir alone is enough to fine-tune from, evaluate or export."""
        return {}

    def flops_per_example(self, seq_len: int) -> float:
        """Forward matmul FLOPs of one example run at `seq_len`, for MFU (0: not reported)."""
        del seq_len
        return 0.0

    def final_report(self, eval_metrics: dict[str, dict[str, float]]) -> None:
        """Printed by host 0 once training reaches its last step, with the last evaluation
        (split -> metrics)."""
        del eval_metrics
