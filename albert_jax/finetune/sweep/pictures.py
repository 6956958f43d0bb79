"""A sweep's pictures (PNG, matplotlib's Agg backend), from the rows of results.py:

  W/sweep_grid.png    the objective over the space: a heat map for two list dimensions, else the
                      objective against one dimension's values (a line per value of the others)
  W/sweep_seeds.png   the spread over seeds: every run's value per configuration, the objective
                      marked
  W/sweep_curves.png  the dev curve of every trial (its metrics.jsonl, as the pruner saw it)
"""
from __future__ import annotations

import io
import math
from typing import Any

from etils import epath

from albert_jax import files
from albert_jax.finetune.sweep import trial as trial_lib
from albert_jax.finetune.sweep.plan import SweepPlan
from albert_jax.train import workdir as workdir_names

GRID_FILE = "sweep_grid.png"
SEEDS_FILE = "sweep_seeds.png"
CURVES_FILE = "sweep_curves.png"


def _label(plan: SweepPlan, params: dict[str, Any]) -> str:
    return ", ".join(f"{dimension.key}={params[dimension.key]:g}"
                     if isinstance(params[dimension.key], float)
                     else f"{dimension.key}={params[dimension.key]}"
                     for dimension in plan.dimensions)


def _save(figure: Any, path: epath.Path) -> str:
    from matplotlib import pyplot
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    pyplot.close(figure)
    files.write_atomically(path, png.getvalue())  # a gs:// workdir too
    return str(path)


def _grid(pyplot: Any, plan: SweepPlan, rows: list[dict[str, Any]]) -> Any:
    scored = [row for row in rows if "objective" in row]
    title = f"{plan.objective} dev {plan.metric} over {len(plan.seeds)} seed(s)"
    keys = [dimension.key for dimension in plan.dimensions]
    if len(keys) == 2 and all(dimension.kind == "list" for dimension in plan.dimensions):
        rows_values, columns_values = (list(dimension.values) for dimension in plan.dimensions)
        table = [[math.nan] * len(columns_values) for _ in rows_values]
        for row in scored:
            table[rows_values.index(row["params"][keys[0]])][
                columns_values.index(row["params"][keys[1]])] = row["objective"]
        figure, axes = pyplot.subplots(figsize=(1.2 * len(columns_values) + 3,
                                                0.8 * len(rows_values) + 2.5))
        image = axes.imshow(table, cmap="viridis", aspect="auto")
        figure.colorbar(image, ax=axes, label=plan.metric)
        axes.set_xticks(range(len(columns_values)), [f"{value}" for value in columns_values])
        axes.set_yticks(range(len(rows_values)), [f"{value}" for value in rows_values])
        axes.set_xlabel(keys[1])
        axes.set_ylabel(keys[0])
        for i, line in enumerate(table):
            for j, value in enumerate(line):
                if not math.isnan(value):
                    axes.text(j, i, f"{value:.3f}", ha="center", va="center", color="white")
    else:
        figure, axes = pyplot.subplots(figsize=(6, 4))
        others: dict[str, list[tuple[Any, float]]] = {}
        for row in scored:
            rest = {key: row["params"][key] for key in keys[1:]}
            label = ", ".join(f"{key}={value}" for key, value in rest.items()) or plan.metric
            others.setdefault(label, []).append((row["params"][keys[0]], row["objective"]))
        for label, points in others.items():
            numeric = all(isinstance(x, (int, float)) for x, _ in points)
            points.sort(key=lambda point: point[0] if numeric else str(point[0]))
            xs = [x if numeric else str(x) for x, _ in points]
            axes.plot(xs, [y for _, y in points], marker="o", label=label)
        if plan.dimensions[0].kind == "loguniform" or (
                plan.dimensions[0].kind == "list" and all(
                    isinstance(value, float) and value > 0 for value in plan.dimensions[0].values)
                and max(plan.dimensions[0].values) / min(plan.dimensions[0].values) >= 10):
            axes.set_xscale("log")
        axes.set_xlabel(keys[0])
        axes.set_ylabel(plan.metric)
        if len(others) > 1:
            axes.legend(fontsize="small")
    axes.set_title(title)
    return figure


def _seeds(pyplot: Any, plan: SweepPlan, rows: list[dict[str, Any]]) -> Any:
    scored = [row for row in rows if row["runs"]]
    figure, axes = pyplot.subplots(figsize=(6, 0.45 * len(scored) + 1.8))
    for index, row in enumerate(reversed(scored)):
        values = [run["value"] for run in row["runs"]]
        axes.scatter(values, [index] * len(values), color="tab:blue", alpha=0.7)
        axes.scatter([row["objective"]], [index], marker="|", s=300, color="tab:red")
    axes.set_yticks(range(len(scored)), [_label(plan, row["params"]) for row in reversed(scored)],
                    fontsize="small")
    axes.set_xlabel(f"dev {plan.metric} (dots: seeds; bar: {plan.objective})")
    axes.set_title("spread over seeds per configuration")
    return figure


def _curves(pyplot: Any, plan: SweepPlan, rows: list[dict[str, Any]], root: epath.Path) -> Any:
    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    for row in rows:
        for folder in row["folders"]:
            run_dirs = ([root / folder] if plan.trial_per_seed else
                        [workdir_names.seed_dir(root / folder, seed) for seed in plan.seeds])
            for run_dir in run_dirs:
                curve = trial_lib.dev_curve(plan, run_dir)
                if curve:
                    axes.plot([step for step, _ in curve], [value for _, value in curve],
                              marker=".", alpha=0.8,
                              label=f"{folder}: {_label(plan, row['params'])}")
    axes.set_xlabel("step")
    axes.set_ylabel(f"dev {plan.metric}")
    axes.set_title("dev curves of every trial")
    if 0 < len(axes.lines) <= 12:
        axes.legend(fontsize="x-small")
    return figure


def write_pictures(plan: SweepPlan, rows: list[dict[str, Any]], root: epath.Path) -> list[str]:
    """Writes the three pictures (once a configuration has finished); returns their paths."""
    if not any(row["runs"] for row in rows):
        return []
    import matplotlib  # only here: every other command starts without it

    matplotlib.use("Agg")  # no display on a pod host
    from matplotlib import pyplot
    return [_save(_grid(pyplot, plan, rows), root / GRID_FILE),
            _save(_seeds(pyplot, plan, rows), root / SEEDS_FILE),
            _save(_curves(pyplot, plan, rows, root), root / CURVES_FILE)]
