"""`albert-jax ablate`: one of the paper's ablation tables (SPEC 10), every row x every seed.

  albert-jax ablate --table=5 --workdir=runs/table5 --scale=demo --seeds=3

The rows are the named configs of configs/ablation.py. Each (row, seed) is pretrained in its own
workdir `W/<row>/seed<k>` by the one loop (train/loop.py), then evaluated on held-out data:

- MLM accuracy and the sentence head's accuracy (SPEC 5.6) on the eval split. For Table 5 every
  row is scored on BOTH an NSP-format and an SOP-format eval set, built by the same builder from
  the same held-out documents (the eval split is chosen by a hash of the document, not by the
  objective), with the row's own sentence head: the NSP model on SOP data, the SOP model on NSP
  data, and the `none` model with its untrained head, as the paper's Table 5 does. Label 1 means
  "swapped" in SOP data and "random next" in NSP data, 0 "in order" in both (data/building/instances.py),
  so one head is scored on either. MLM accuracy is read from the SOP-format set for every row:
  the same examples and masks for all rows.
- downstream fine-tuning from the row's checkpoint: at demo scale the paraphrase task of
  finetune/demo.py (written once into `W/paraphrase`), at paper scale the fine-tuning configs
  listed in `config.ablation.downstream`.

A finished (row, seed) leaves `result.json` in its workdir and is skipped by a rerun; a killed
one resumes where its checkpoints are (the loop's exact resume, fine-tuning too). Seeds differ in
initialisation and data order (`config.seed + k`); the examples are built once with the base
seed (`data.seed`), so every seed and row of a table shares one tokenizer and one dataset per
objective, under `W/tokenizer` and `W/data`. Table 11 warm-starts each depth from the previous
row's checkpoint of the same seed (all-shared: the very same parameters).

Outputs: `W/table.json` (every run and the mean and std per row), `W/table.md` (the paper's
columns: ours as mean ± std over seeds beside the paper's numbers, parameter counts) and
`W/table.png` (the main column per row, error bars = std).
"""
from __future__ import annotations

import importlib.util
import io
import json
import math
import os
import statistics
import types
from typing import Any, Callable

import jax
import ml_collections
from etils import epath

from albert_jax import config as config_lib
from albert_jax import pretraining
from albert_jax.data import tokenizers
from albert_jax.data.building import builder
from albert_jax.files import write_atomically
from albert_jax.finetune import demo as finetune_demo
from albert_jax.finetune import run as finetune_run
from albert_jax.model import albert
from albert_jax.train import buckets, checkpoint, loop, sharding
from albert_jax.train import step as step_lib
from albert_jax.train import workdir as workdir_names

RESULT_FILE = "result.json"
EVAL_FORMATS = {5: ("nsp", "sop")}  # tables scored on both sentence formats; others: their own
PARAPHRASE_LR = 1e-4  # finetune/demo.py's default


def backbone_parameter_count(model_config: Any) -> int:
    """Parameters of the backbone incl. the pooler, what the paper's "params" columns count
    (SPEC 7.2; tests/test_model.py pins the formula)."""
    return sum(math.prod(leaf.shape) for leaf in
               jax.tree.leaves(sharding.unbox(albert.abstract_backbone_params(model_config))))


def seed_config(config: ml_collections.ConfigDict, workdir: str, seed_index: int
                ) -> ml_collections.ConfigDict:
    """The run config of seed `seed_index` of a row: seed + k, the data built with the base
    seed, Table 11's warm start; at demo scale the table's own tokenizer and data folder in
    `workdir` (at paper scale those of the config: the user's tokenizer and data)."""
    run = config.copy_and_resolve_references()
    run.unlock()
    run.data.seed = config.seed if config.data.seed is None else config.data.seed
    run.seed = config.seed + seed_index
    if config.ablation.scale == "demo":
        run.data.tokenizer = os.path.join(workdir, "tokenizer", "spm.model")
        run.data.dir = os.path.join(workdir, "data")
    if config.ablation.warm_start_from:
        run.init_from = row_workdir(workdir, config.ablation.warm_start_from, seed_index)
    run.lock()
    return run


def row_workdir(workdir: str, row: str, seed_index: int) -> str:
    return os.path.join(workdir, row, f"seed{seed_index}")


def with_objective(config: ml_collections.ConfigDict, objective: str) -> ml_collections.ConfigDict:
    """`config` reading (or building) the data of sentence objective `objective`."""
    changed = config.copy_and_resolve_references()
    changed.data.sentence_objective = objective
    return changed


def intrinsic_eval(config: ml_collections.ConfigDict, workdir: str,
                   formats: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """The SPEC 5.6 metrics of the latest checkpoint in `workdir` on the eval split of each
    sentence format in `formats` (format -> metrics): the row's own heads, any format."""
    mesh = sharding.make_mesh(config.mesh)
    model_config, params = checkpoint.load(workdir, mesh=mesh)
    tasks = {objective: pretraining.PretrainingTask(with_objective(config, objective),
                                                    model_config) for objective in formats}
    return score_formats(tasks, params, mesh)


def score_formats(tasks: dict[str, pretraining.PretrainingTask], params: Any,
                  mesh: jax.sharding.Mesh) -> dict[str, dict[str, float]]:
    """format -> the metrics of `params` over one pass of that task's eval batches."""
    scores = {}
    params_shardings = jax.tree.map(lambda leaf: leaf.sharding, params)
    for objective, task in tasks.items():
        eval_step = step_lib.jit_eval_step(task, mesh, params_shardings)
        metrics = loop.evaluate(task, eval_step, params, sharding.batch_sharding(mesh),
                                pretraining.EVAL_SPLIT, buckets.lengths_of(task.config))
        scores[objective] = {key: metrics[key] for key in
                             ("masked_lm_accuracy", "sentence_order_accuracy", "masked_lm_loss")}
    return scores


def majority_baselines(config: ml_collections.ConfigDict,
                       formats: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """format -> the accuracy of constant guesses on its eval set (the most frequent masked
    token, the majority sentence label): chance level, which is not 50 % for every format (an
    NSP-format set has more "random next" pairs: a single-segment chunk always takes its B
    from another document, data/building/instances.py)."""
    model_config = config_lib.model_config(config)
    return {objective: pretraining.majority_baselines(pretraining.PretrainingTask(
                with_objective(config, objective), model_config).eval_batches(
                    pretraining.EVAL_SPLIT))
            for objective in formats}


def _paraphrase_accuracy(config: ml_collections.ConfigDict, table_workdir: str,
                         pretrained: str) -> dict[str, float]:
    """Best dev accuracy of the demo's paraphrase task fine-tuned from `pretrained`."""
    steps = config.ablation.finetune_steps
    data_path = os.path.join(table_workdir, "paraphrase", "MRPC")
    if not (epath.Path(data_path) / "dev.tsv").exists():
        finetune_demo.write_paraphrase_task(os.path.dirname(data_path),
                                            num_train=steps * 32, num_dev=500)
    finetune_config = finetune_demo.demo_config(
        data_path, pretrained, os.path.join(pretrained, workdir_names.TOKENIZER_FILE), steps,
        PARAPHRASE_LR)
    best = finetune_run.finetune(finetune_config, os.path.join(pretrained, "paraphrase"))
    return {"paraphrase": best["value"]}


def load_config_module(path: str) -> types.ModuleType:
    """The config file at `path` (e.g. configs/ablation.py) as a module, as config_flags loads
    it: its `get_config(arg)` and, for configs/ablation.py, its TABLES."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"config file {path} does not exist (run from the repository "
                                "root, or pass --config=<path>/configs/ablation.py)")
    module_spec = importlib.util.spec_from_file_location(
        f"_albert_jax_config_{os.path.basename(path)[:-3]}", path)
    assert module_spec is not None and module_spec.loader is not None  # a .py path has a loader
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _finetune_config(spec: str, settings: str, init_from: str) -> ml_collections.ConfigDict:
    """The fine-tuning config of `path.py:arg` from `init_from`, with `settings`
    ("data.path=DIR,..." or "data.tfds_name=squad/v1.1": keys of that config file)."""
    path, _, arg = spec.partition(":")
    config = load_config_module(path).get_config(arg or None)
    config.init_from = init_from
    for setting in filter(None, settings.split(",")):
        key, _, value = setting.partition("=")
        current = config
        for part in key.split(".")[:-1]:
            current = current[part]
        name = key.split(".")[-1]
        if name not in current:
            raise ValueError(f"downstream {spec}: its config has no key {key!r} (from "
                             f"ablation.downstream_data {settings!r})")
        current[name] = type(current[name])(value)
    return config


def downstream(config: ml_collections.ConfigDict, table_workdir: str,
               pretrained: str) -> dict[str, float]:
    """Fine-tuning scores of the row's checkpoint: name -> the task's best dev value."""
    scores: dict[str, float] = {}
    for spec in config.ablation.downstream:
        if spec == "paraphrase":
            scores.update(_paraphrase_accuracy(config, table_workdir, pretrained))
            continue
        name = load_config_module(spec.partition(":")[0]).get_config(
            spec.partition(":")[2] or None).task
        settings = config.ablation.downstream_data.get(name, "")
        if not settings:
            print(f"downstream {spec}: no --config.ablation.downstream_data.{name}=... "
                  "(e.g. data.path=DIR); skipped", flush=True)
            continue
        best = finetune_run.finetune(_finetune_config(spec, settings, pretrained),
                                     os.path.join(pretrained, name))
        scores[name] = best["value"]
    return scores


def _prepare(config: ml_collections.ConfigDict, formats: tuple[str, ...]) -> None:
    """The table's tokenizer and the datasets of this row (its objective and eval formats);
    each is made once and found by later rows and reruns."""
    if not epath.Path(config.data.tokenizer).exists():  # in the table's workdir: gs:// too
        epath.Path(config.data.tokenizer).parent.mkdir(parents=True, exist_ok=True)
        tokenizers.train_from_config(config)
    for objective in dict.fromkeys((config.data.sentence_objective, *formats)):
        builder.build_from_config(with_objective(config, objective))


def run_row(config: ml_collections.ConfigDict, table_workdir: str,
            seed_index: int) -> dict[str, Any]:
    """Pretrain, evaluate and fine-tune one (row, seed); its result (read back if finished)."""
    run = seed_config(config, table_workdir, seed_index)
    workdir = row_workdir(table_workdir, config.ablation.row, seed_index)
    result_path = epath.Path(workdir) / RESULT_FILE
    if result_path.exists():
        print(f"--- {config.ablation.row} seed {seed_index}: done ({result_path})", flush=True)
        return json.loads(result_path.read_text())
    print(f"--- {config.ablation.row} seed {seed_index} in {workdir}", flush=True)
    formats = EVAL_FORMATS.get(config.ablation.table, (run.data.sentence_objective,))
    _prepare(run, formats)
    model_config = config_lib.model_config(run)
    loop.train_and_evaluate(run, workdir, pretraining.PretrainingTask(run, model_config))
    scores = intrinsic_eval(run, workdir, formats)
    result = {"row": config.ablation.row, "seed": run.seed,
              "params": backbone_parameter_count(model_config),
              "masked_lm_accuracy": scores["sop" if "sop" in scores else formats[0]]
              ["masked_lm_accuracy"],
              **{f"{objective}_accuracy": metrics["sentence_order_accuracy"]
                 for objective, metrics in scores.items()},
              **downstream(run, table_workdir, workdir)}
    if jax.process_index() == 0:
        write_atomically(result_path, json.dumps(result, indent=2))
    return result


def run_table(row_configs: dict[str, ml_collections.ConfigDict], workdir: str,
              seeds: int) -> dict[str, Any]:
    """Every row x seed, then table.json, table.md and table.png in `workdir`; returns the
    table.json record. Seed by seed, each seed's rows in order (Table 11 warm-starts from the
    row before): a run stopped early has whole tables of the first seeds (`--seeds=1`)."""
    if seeds < 1:
        raise ValueError(f"--seeds={seeds}: need at least 1")
    epath.Path(workdir).mkdir(parents=True, exist_ok=True)
    # Every seed of a row (and every row of one shape) runs the same programs: a compilation
    # cache in the table's workdir compiles each once, unless JAX_COMPILATION_CACHE_DIR names
    # one already.
    if not jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]  # an option made at runtime
        jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, "jax_cache"))
    runs: dict[str, list[dict[str, Any]]] = {row: [] for row in row_configs}
    for seed in range(seeds):
        for row, config in row_configs.items():
            runs[row].append(run_row(config, workdir, seed))
    record = summarize(row_configs, runs)
    first = next(iter(row_configs.values()))
    record["baselines"] = majority_baselines(
        seed_config(first, workdir, 0),
        EVAL_FORMATS.get(first.ablation.table, (first.data.sentence_objective,)))
    if jax.process_index() != 0:
        return record
    write_atomically(os.path.join(workdir, "table.json"), json.dumps(record, indent=2))
    write_atomically(os.path.join(workdir, "table.md"), markdown(record))
    print(markdown(record), flush=True)
    plot(record, os.path.join(workdir, "table.png"))
    print(f"wrote {workdir}/table.json, table.md, table.png", flush=True)
    return record


def main_column(table: int, metrics: list[str]) -> str:
    """The column the bar chart shows: downstream accuracy (the paper's Avg stands there)."""
    downstream_metrics = [metric for metric in metrics if metric not in _INTRINSIC]
    return downstream_metrics[0] if downstream_metrics else "masked_lm_accuracy"


_INTRINSIC = ("params", "masked_lm_accuracy", "nsp_accuracy", "sop_accuracy", "none_accuracy")


def summarize(row_configs: dict[str, ml_collections.ConfigDict],
              runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """table.json: per row the runs, mean and std (sample std; 0 for one seed) of every
    metric, and the paper's numbers."""
    first = next(iter(row_configs.values()))
    rows: dict[str, dict[str, Any]] = {}
    for row, results in runs.items():
        metrics = [key for key in results[0] if key not in ("row", "seed")]
        rows[row] = {
            "runs": results,
            "mean": {key: statistics.fmean(r[key] for r in results) for key in metrics},
            "std": {key: statistics.stdev(r[key] for r in results) if len(results) > 1 else 0.0
                    for key in metrics},
            "paper": dict(row_configs[row].ablation.paper)}
    metrics = list(next(iter(rows.values()))["mean"])
    return {"table": first.ablation.table, "scale": first.ablation.scale,
            "seeds": len(next(iter(runs.values()))), "metrics": metrics,
            "main_column": main_column(first.ablation.table, metrics), "rows": rows}


_LABELS = {"params": "params (ours)", "masked_lm_accuracy": "MLM", "nsp_accuracy": "NSP",
           "sop_accuracy": "SOP", "none_accuracy": "sentence head",
           "paraphrase": "paraphrase dev acc"}


def markdown(record: dict[str, Any]) -> str:
    """The table: per row our metrics (accuracies in %, mean ± std over seeds) and the
    paper's columns beside them."""
    ours = record["metrics"]
    paper_columns = list(next(iter(record["rows"].values()))["paper"])
    header = (["row"] + [_LABELS.get(key, key) for key in ours]
              + [f"paper {column}" for column in paper_columns])
    lines = [f"Table {record['table']} at {record['scale']} scale, mean ± std over "
             f"{record['seeds']} seed(s); accuracies in %.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, summary in record["rows"].items():
        cells = [row]
        for key in ours:
            mean, std = summary["mean"][key], summary["std"][key]
            cells.append(f"{int(mean):,}" if key == "params"
                         else f"{100 * mean:.1f} ± {100 * std:.1f}")
        cells += [str(summary["paper"][column]) for column in paper_columns]
        lines.append("| " + " | ".join(cells) + " |")
    for objective, baseline in record.get("baselines", {}).items():
        lines.append(f"\nChance on the {objective.upper()}-format eval set: the majority sentence "
                     f"label {100 * baseline['sentence_order_accuracy']:.1f} %, the most "
                     f"frequent masked token {100 * baseline['masked_lm_accuracy']:.1f} %.")
    return "\n".join(lines) + "\n"


def plot(record: dict[str, Any], path: str) -> None:
    """Writes `path`: a PNG bar chart of the main column per row (error bars: std over seeds)."""
    import matplotlib  # only here: every other command starts without it

    matplotlib.use("Agg")  # no display on a pod host
    from matplotlib import pyplot
    key = record["main_column"]
    rows = list(record["rows"])
    means = [100 * record["rows"][row]["mean"][key] for row in rows]
    stds = [100 * record["rows"][row]["std"][key] for row in rows]
    figure, axes = pyplot.subplots(figsize=(1.2 * len(rows) + 2, 3.5))
    axes.bar(rows, means, yerr=stds, capsize=4, color="tab:blue")
    axes.set_ylabel(f"{_LABELS.get(key, key)} (%)")
    axes.set_ylim(min(means) - 2 * max(stds + [1]) - 5, max(means) + 2 * max(stds + [1]) + 2)
    axes.set_title(f"ALBERT Table {record['table']} ablation, {record['scale']} scale, "
                   f"{record['seeds']} seed(s)")
    axes.tick_params(axis="x", rotation=30)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    pyplot.close(figure)
    write_atomically(path, png.getvalue())  # a gs:// workdir too


def row_configs(get_config: Callable[[str], ml_collections.ConfigDict], table: int,
                rows: tuple[str, ...], scale: str,
                overrides: dict[str, Any]) -> dict[str, ml_collections.ConfigDict]:
    """row -> `get_config("table=T,row=R,scale=S")` with the command line's
    `--config.KEY=VALUE` overrides applied to every row."""
    configs = {}
    for row in rows:
        config = get_config(f"table={table},row={row},scale={scale}")
        config.update_from_flattened_dict(overrides)
        configs[row] = config
    return configs
