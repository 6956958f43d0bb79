"""A sweep's result, from every trial the study holds: one row per configuration.

  W/sweep.csv, W/sweep.md   per configuration: its values, the runs finished, median, mean, std
                            (sample), min and max of the dev metric over its seeds, the step of
                            its best run, failed and pruned counts, its trial folders
  W/best_trial.json         the configuration of the best objective (median or mean over seeds)
                            and the folder of its best run: `evaluate`, `predict` and `export
                            --workdir=W` use that run (finetune/run.py)
  W/sweep_*.png             pictures.py
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from typing import Any

from etils import epath

from albert_jax import files
from albert_jax.finetune.sweep import pictures
from albert_jax.finetune.sweep.plan import SweepPlan
from albert_jax.train import workdir as workdir_names

CSV_FILE = "sweep.csv"
TABLE_FILE = "sweep.md"
STATS = ("median", "mean", "std", "min", "max")


def live_trials(trials: list[Any]) -> list[Any]:
    """The trials that stand for a configuration: not a trial queued again under a later
    number (its run continued in its folder under that number), nor a duplicate a worker gave
    up."""
    superseded = {number for trial in trials
                  for number in trial.system_attrs.get("retry_history", ())}
    return [trial for trial in trials
            if trial.number not in superseded and not trial.user_attrs.get("duplicate")]


def objective_value(plan: SweepPlan, values: list[float]) -> float:
    """The sweep's objective over the seeds' values: their median or mean."""
    return statistics.median(values) if plan.objective == "median" else statistics.mean(values)


def _configuration(plan: SweepPlan, params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(params.get(dimension.key) for dimension in plan.dimensions)


def configuration_rows(plan: SweepPlan, trials: list[Any]) -> list[dict[str, Any]]:
    """One row per configuration tried, best objective first: "params", "runs" (every
    finished run's {"seed", "folder", "value", "step"}), the STATS of their values, "objective",
    "best_step", "best_folder", "failed", "pruned", "running", "folders", "failures"."""
    import optuna  # installed: the trials are Optuna's

    states = optuna.trial.TrialState
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for trial in sorted(live_trials(trials), key=lambda trial: trial.number):
        if trial.state == states.WAITING or not trial.params:
            continue
        params = {dimension.key: trial.params.get(dimension.key)
                  for dimension in plan.dimensions}
        row = rows.setdefault(_configuration(plan, params), {
            "params": params, "runs": [], "failed": 0, "pruned": 0, "running": 0,
            "folders": [], "failures": []})
        folder = trial.user_attrs.get("folder")
        if folder and folder not in row["folders"]:
            row["folders"].append(folder)
        if trial.state == states.COMPLETE:
            row["runs"] += trial.user_attrs.get("runs", [])
        elif trial.state == states.PRUNED:
            row["pruned"] += 1
        elif trial.state == states.FAIL:
            row["failed"] += 1
            row["failures"].append(f"{folder}: {trial.user_attrs.get('failure', 'interrupted')}")
        else:
            row["running"] += 1
    for row in rows.values():
        values = [run["value"] for run in row["runs"]]
        if values:
            best_run = max(row["runs"], key=lambda run: run["value"])
            row.update(median=statistics.median(values), mean=statistics.mean(values),
                       std=statistics.stdev(values) if len(values) > 1 else 0.0,
                       min=min(values), max=max(values), objective=objective_value(plan, values),
                       best_step=best_run["step"], best_folder=best_run["folder"])
    return sorted(rows.values(), key=lambda row: -row.get("objective", float("-inf")))


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def _value(value: Any) -> str:
    """A configuration's value as written in the space (1e-05, not 0.0000)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _csv(plan: SweepPlan, rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = [dimension.key for dimension in plan.dimensions]
    writer.writerow([*keys, "runs", *STATS, "best_step", "failed", "pruned", "folders"])
    for row in rows:
        writer.writerow([*(row["params"][key] for key in keys), len(row["runs"]),
                         *(repr(row[stat]) if stat in row else "" for stat in STATS),
                         row.get("best_step", ""), row["failed"], row["pruned"],
                         " ".join(row["folders"])])
    return out.getvalue()


def _markdown(plan: SweepPlan, rows: list[dict[str, Any]]) -> str:
    keys = [dimension.key for dimension in plan.dimensions]
    seeds = ", ".join(map(str, plan.seeds))
    summary = (f"Dev {plan.metric} ({plan.split}) of each configuration over seeds {seeds}; "
               f"the best by the {plan.objective}. Sampler {plan.sampler}, pruner {plan.pruner}.")
    lines = [f"# Sweep {plan.study_name}", "", summary, "",
             "| " + " | ".join([*keys, "runs", *STATS, "best step", "failed", "pruned",
                                "folders"]) + " |",
             "|" + "---|" * (len(keys) + len(STATS) + 5)]
    for index, row in enumerate(rows):
        mark = " **best**" if index == 0 and "objective" in row else ""
        lines.append("| " + " | ".join([
            *(_value(row["params"][key]) for key in keys), f"{len(row['runs'])}{mark}",
            *(_number(row.get(stat)) for stat in STATS), _number(row.get("best_step")),
            str(row["failed"]), str(row["pruned"]), ", ".join(row["folders"])]) + " |")
    failures = [failure for row in rows for failure in row["failures"]]
    if failures:
        lines += ["", "Failed trials:", ""] + [f"- {failure}" for failure in failures]
    return "\n".join(lines) + "\n"


def best_record(plan: SweepPlan, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """best_trial.json: the configuration of the best objective and its best run's folder."""
    scored = [row for row in rows if "objective" in row]
    if not scored:
        return None
    best = scored[0]
    return {"params": best["params"], "metric": plan.metric, "split": plan.split,
            "objective": plan.objective, "value": best["objective"],
            "folder": best["best_folder"], "step": best["best_step"],
            "runs": best["runs"], "study_name": plan.study_name}


def write_results(plan: SweepPlan, trials: list[Any], workdir: str) -> list[str]:
    """Writes the table, best_trial.json (once a configuration has finished) and the pictures;
    returns the paths written."""
    rows = configuration_rows(plan, trials)
    root = epath.Path(workdir)
    written = []
    for name, text in ((CSV_FILE, _csv(plan, rows)), (TABLE_FILE, _markdown(plan, rows))):
        files.write_atomically(root / name, text)
        written.append(str(root / name))
    best = best_record(plan, rows)
    if best is not None:
        files.write_atomically(root / workdir_names.BEST_TRIAL_FILE, json.dumps(best, indent=2))
        written.append(str(root / workdir_names.BEST_TRIAL_FILE))
    written += pictures.write_pictures(plan, rows, root)
    return written
