"""benchmarks/accelerator_check.py --smoke end to end on the CPU (a subprocess, as it runs on a
GPU day): every part measured, or skipped with a note saying why, in the JSON it writes; the
comparisons it makes pass. The GPU run itself happens only where a GPU is lent
(docs/performance.md); this keeps the script from rotting between those days."""
from __future__ import annotations

import json
import math
import subprocess
import sys

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
        assert part["status"] in ("done", "partial", "skipped"), (name, part.get("error"),
                                                                  part.get("traceback"))
        if part["status"] != "done":
            assert part["note"], name
        if part["status"] == "skipped":
            continue
        assert not [row for row in part.get("rows", []) if "error" in row], (name, part)
        numbers = _numbers(name, part)
        assert numbers and all(isinstance(value, (int, float)) and math.isfinite(value)
                               for value in numbers), (name, numbers)
    parts = data["parts"]
    if parts["equality"]["status"] != "skipped":
        assert all(row["passed"] for row in parts["equality"]["rows"]), parts["equality"]
    if parts["loss"]["status"] == "done":
        assert parts["loss"]["passed"], parts["loss"]
    # Without cuDNN, the cudnn rows say so rather than vanish.
    if parts["pretraining"]["status"] == "done":
        assert any("no cuDNN" in row.get("skipped", "") for row in parts["pretraining"]["rows"])
    assert "pretraining:" in process.stdout  # the table
