"""benchmarks/accelerator_check.py --smoke end to end on the CPU (a subprocess, as it runs on a
GPU day): every part measured, or skipped with a note saying why, in the JSON it writes; the
comparisons it makes pass. The GPU run itself happens only where a GPU is lent
(docs/performance.md); this keeps the script from rotting between those days. And, in this
process, a part whose budget runs out before it measured a row: skipped, with its note."""
from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import subprocess
import sys
from types import ModuleType
from typing import Any, Callable
from unittest import mock

import pytest

from cli_fixtures import REPO, one_device_environment

PARTS = ("equality", "loss", "pretraining", "torch", "finetune", "predict", "plan")


def _numbers(part_name: str, part: dict) -> list:
    """The figures a part that ran must hold."""
    rows = [row for row in part.get("rows", []) if "skipped" not in row]
    fields = {"equality": ("outputs_worst_ratio", "gradients_worst_ratio"),
              "pretraining": ("compile_s", "step_s", "tokens_per_s", "planner_peak_bytes"),
              "torch": ("first_call_s", "step_s", "tokens_per_s"),
              "finetune": ("compile_s", "step_s", "examples_per_s"),
              "plan": ("planner_peak_bytes",)}
    if part_name == "loss":
        return [part["cpu_loss"], part["device_loss_highest"], part["device_loss_default"]]
    if part_name == "predict":
        return list(part["rounds_rows_per_s"].values()) + [part["ratio_ours_over_hf"]]
    return [row[field] for row in rows for field in fields[part_name]]


def _assert_measured_or_says_why_not(name: str, part: dict) -> None:
    """A part's record is done with its figures, or partial with them and a note, or skipped
    with a note; no row failed."""
    assert part["status"] in ("done", "partial", "skipped"), (name, part.get("error"),
                                                              part.get("traceback"))
    if part["status"] != "done":
        assert part["note"], name
    if part["status"] == "skipped":
        return
    assert not [row for row in part.get("rows", []) if "error" in row], (name, part)
    numbers = _numbers(name, part)
    assert numbers and all(isinstance(value, (int, float)) and math.isfinite(value)
                           for value in numbers), (name, numbers)


@pytest.mark.slow
def test_smoke_run_measures_every_part_or_says_why_not(tmp_path):
    output = tmp_path / "accelerator_check.json"
    process = subprocess.run(  # one device, as the one GPU the check is lent
        [sys.executable, "benchmarks/accelerator_check.py", "--smoke", f"--output={output}"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=one_device_environment())
    assert process.returncode == 0, process.stderr[-3000:]
    data = json.loads(output.read_text())
    assert data["smoke"] is True and data["platform"] == "cpu"
    assert tuple(data["parts"]) == PARTS
    for name, part in data["parts"].items():
        _assert_measured_or_says_why_not(name, part)
    parts = data["parts"]
    if parts["equality"]["status"] != "skipped":
        assert all(row["passed"] for row in parts["equality"]["rows"]), parts["equality"]
    if parts["loss"]["status"] == "done":
        assert parts["loss"]["passed"], parts["loss"]
    # Without cuDNN, the cudnn rows say so rather than vanish.
    if parts["pretraining"]["status"] == "done":
        assert any("no cuDNN" in row.get("skipped", "") for row in parts["pretraining"]["rows"])
    assert "pretraining:" in process.stdout  # the table


@pytest.fixture(scope="module")
def accelerator_check() -> ModuleType:
    """benchmarks/accelerator_check.py imported here; the variables it sets in the environment
    for a GPU run of its own are left out of this process's, which the command-line runs of
    the tests after it inherit."""
    with mock.patch.dict(os.environ):
        return importlib.import_module("benchmarks.accelerator_check")


def _time_left_for(checks: int) -> Callable[[], float]:
    """A part's seconds_left that has time for its first `checks` looks, then none."""
    looks = iter(range(checks, -1, -1))
    return lambda: float(next(looks, 0))


def test_a_part_out_of_budget_before_a_measured_row_is_skipped_with_a_note(
        accelerator_check, monkeypatch, tmp_path):
    """pretraining on the CPU, its batch chosen and its rows measured by stand-ins: out of time
    at once, or after the cudnn row it skips (no cuDNN), it measured nothing: skipped; after
    its first measured row, partial. Its note counts the rows measured."""
    monkeypatch.setattr(accelerator_check, "choose_batch", lambda settings, preset: {"batch": 4})

    def measured_row(preset: str, dtype: str, impl: str, batch: int, settings: Any) -> dict:
        return {"preset": preset, "dtype": dtype, "attention": impl, "batch": batch,
                "compile_s": 1.0, "step_s": 0.5, "tokens_per_s": 1024.0,
                "planner_peak_bytes": 4096}

    monkeypatch.setattr(accelerator_check, "pretraining_row", measured_row)
    report = accelerator_check.Report(str(tmp_path / "check.json"), accelerator_check.SMOKE,
                                      True, 170.0)
    for checks, status, measured in ((0, "skipped", 0), (2, "skipped", 0), (3, "partial", 1)):
        seconds_left = _time_left_for(checks)  # in place of the report's clock
        report.run("pretraining", lambda _: accelerator_check.pretraining_part(
            report.settings, seconds_left, report.shared))
        part = json.loads((tmp_path / "check.json").read_text())["parts"]["pretraining"]
        assert (part["status"], part["note"]) == (
            status, f"the part's budget ran out after {measured} of 3 rows"), checks
        _assert_measured_or_says_why_not("pretraining", part)
    # The smoke's fine-tuning: the first bucket and seq_len; a GPU run's: every bucket.
    assert accelerator_check.Settings().finetune_every_bucket
    assert not accelerator_check.SMOKE.finetune_every_bucket
    monkeypatch.setattr(accelerator_check, "finetune_row",
                        lambda settings, config, lengths, buckets: {
                            "dtype": config.dtype, "bucket": lengths[1], "lengths": lengths,
                            "step_s": 1.0})
    for every_bucket, timed in ((False, [(8, 32), (48, 128)]),
                                (True, [(8, 32), (16, 64), (32, 96), (48, 128)])):
        settings = dataclasses.replace(accelerator_check.SMOKE, finetune_every_bucket=every_bucket)
        part = accelerator_check.finetune_part(settings, lambda: 1.0)
        assert [tuple(row["lengths"]) for row in part["rows"]] == timed
    out_of_time = accelerator_check.finetune_part(accelerator_check.SMOKE, _time_left_for(0))
    assert (out_of_time["status"], out_of_time["note"]) == (
        "skipped", "the part's budget ran out after 0 of 2 rows")
