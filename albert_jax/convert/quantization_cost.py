"""What `export --quantize=int8` cost, measured at export in ONNX Runtime on the run's own data.

A fine-tuning run: its float32 and int8 graphs each score the run's dev split through the path
`albert-jax evaluate` takes (the task's eval batches at their length buckets, the task's
predictions, loss sums and `eval_metrics`: train/step.py make_eval_step with the model call made
by ONNX Runtime), and the share of the dev predictions (predictions.jsonl's `prediction`) on
which the two agree. A pretraining run: the share of masked positions of one eval batch whose
top-1 masked-LM piece the two graphs agree on.

The run is `albert_jax.finetune.run.FinishedRun` (duck-typed here: convert/ sits below the tasks).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from albert_jax.convert.serving import INPUTS
from albert_jax.train import step as step_lib


class _OnnxModelTask:
    """`task` with its model call made by an ONNX Runtime session of its exported model;
    everything else (predictions, loss sums, metrics) is the task's own."""

    def __init__(self, task: Any, session: Any) -> None:
        self._task = task
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def apply(self, params: Any, batch: Any, *, train: bool, rng: Any) -> Any:
        del params, train, rng  # the weights are in the model file; no dropout at eval
        outputs = self._session.run(None, {name: np.asarray(batch[name], np.int32)
                                           for name in INPUTS})
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def finetuned_cost(run: Any, fp32: bytes, int8: bytes) -> dict[str, Any]:
    """Scores the `fp32` and `int8` ONNX models (bytes) on `run`'s dev split (module
    docstring), prints both and their agreement; returns {"metric", "fp32", "int8",
    "agreement", "rows"}, or {} (said in one line) for a run without a dev split."""
    task = run.task
    split, metric = task.selection.split, task.selection.metric
    if split not in task.eval_splits:
        print(f"no dev split in the run's config: the int8 export's cost on {metric} is not "
              "measured", flush=True)
        return {}
    scores, records = {}, {}
    for name, model in (("fp32", fp32), ("int8", int8)):
        scores[name], records[name] = dev_score(run, _session(model))
    agreement = float(np.mean([_agree(a, b) for a, b in zip(records["fp32"], records["int8"])]))
    print(f"int8 cost on {split} ({len(records['fp32'])} examples, ONNX Runtime): {metric} fp32 "
          f"{scores['fp32']:.4f}, int8 {scores['int8']:.4f}; {100 * agreement:.1f}% of "
          "predictions agree", flush=True)
    return {"metric": metric, "fp32": scores["fp32"], "int8": scores["int8"],
            "agreement": agreement, "rows": len(records["fp32"])}


def dev_score(run: Any, session: Any) -> tuple[float, list[Any]]:
    """`run`'s selection metric on its dev split with `session` (an ONNX Runtime session of its
    exported model, or anything with its `run(None, feeds)`) as the model, through the evaluate
    path; and the dev predictions (predictions.jsonl's `prediction` of each example)."""
    task = run.task
    split = task.selection.split
    onnx_task: Any = _OnnxModelTask(task, session)  # the Task's eval half, duck-typed
    eval_step = step_lib.make_eval_step(onnx_task)
    sums, predictions = dataclasses.replace(run, eval_step=eval_step).predict(
        task.eval_batches(split))
    return (float(task.eval_metrics(split, sums, predictions)[task.selection.metric]),
            [record["prediction"] for record in task.split_records(split, predictions)])


def pretraining_cost(run: Any, fp32: bytes, int8: bytes) -> dict[str, Any]:
    """The share of the masked positions of `run`'s first eval batch whose most probable piece
    the `fp32` and `int8` models (bytes) agree on, printed; returns {"metric", "agreement",
    "rows", "positions"}, or {} (said in one line) when the run's data cannot be read."""
    task = run.task
    try:
        batch = next(iter(task.eval_batches(task.eval_splits[0])))
    except (FileNotFoundError, StopIteration) as error:
        print(f"the run's eval examples cannot be read ({error}): the int8 export's masked-LM "
              "agreement is not measured", flush=True)
        return {}
    feeds = {name: np.asarray(batch[name], np.int32) for name in INPUTS}
    rows = np.arange(feeds["input_ids"].shape[0])[:, None]
    masked = np.asarray(batch["masked_lm_weights"]) > 0
    top1 = {}
    for name, model in (("fp32", fp32), ("int8", int8)):
        (logits,) = _session(model).run(None, feeds)  # [batch, sequence, vocab]
        top1[name] = logits[rows, np.asarray(batch["masked_lm_positions"])].argmax(-1)[masked]
    agreement = float(np.mean(top1["fp32"] == top1["int8"]))
    print(f"int8 cost on {len(rows)} eval examples (ONNX Runtime): the top-1 masked-LM piece "
          f"agrees at {100 * agreement:.1f}% of {int(masked.sum())} masked positions", flush=True)
    return {"metric": "masked_lm_top1_agreement", "agreement": agreement, "rows": len(rows),
            "positions": int(masked.sum())}


def _agree(fp32: Any, int8: Any) -> bool:
    """Whether two predictions agree: equal, or for a number (regression) within 1% (or 0.01)."""
    if isinstance(fp32, float):
        return bool(np.isclose(fp32, int8, rtol=0.01, atol=0.01))
    return bool(fp32 == int8)


def _session(model: bytes) -> Any:
    import onnxruntime  # pylint: disable=import-outside-toplevel

    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
