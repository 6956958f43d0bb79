"""The paper's ablation tables (Tables 3, 4, 5, 11, 12; SPEC 10) as named pretraining configs.

  albert-jax ablate --table=5 --workdir=runs/table5 --scale=demo --seeds=3   # every row
  get_config("table=5,row=sop")              # one row: the paper's ALBERT-base with SOP
  get_config("table=3,row=all-shared-e64,scale=demo")

The argument: `table=3|4|5|11|12`, `row=<name>` (TABLES[table] lists them; default the table's
first), `scale=paper|demo`. A row is configs/pretrain.py at the table's base model with only
the ablated setting changed (`model_overrides`, or `data.sentence_objective` for Table 5).

`scale=paper` is the paper's recipe: 125k steps, batch 4096, seq 512 (SPEC 6.6) on
`data.corpus` (point it at Books+Wiki). `scale=demo` shrinks every row the same way: the
embedded demo corpus, the steps and batch of DEMO_STEPS, every width (E, H, I) times
DEMO_WIDTH[base] / H of the base model (so E/H is the paper's), 2 heads, and the depth of
DEMO_DEPTH. `config.ablation` holds what the table runner needs: the table, the row, the
scale, the downstream budget, the row to warm-start from (Table 11) and the paper's numbers.
"""
from __future__ import annotations

import importlib.util
import os

import ml_collections

from albert_jax.config import parse_arg
from albert_jax.errors import ConfigError

# The base model of each table (SPEC 7.1 shapes) and what each row changes in it.
BASE = {"base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     embedding_size=128),
        "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                      embedding_size=128)}
TABLE_BASE = {3: "base", 4: "base", 5: "base", 11: "large", 12: "large"}
_SHARING = {"all-shared": "all", "shared-attention": "attention", "shared-ffn": "ffn",
            "not-shared": "none"}


def _table_rows() -> dict[int, dict[str, dict]]:
    """table -> row name -> the row's changes: model fields, sentence objective, warm start."""
    rows: dict[int, dict[str, dict]] = {3: {}, 4: {}, 5: {}, 11: {}, 12: {}}
    for sharing in ("not-shared", "all-shared"):  # Table 3: embedding size E
        for embedding in (64, 128, 256, 768):
            rows[3][f"{sharing}-e{embedding}"] = dict(
                model=dict(embedding_size=embedding, sharing=_SHARING[sharing]))
    for embedding in (768, 128):  # Table 4: cross-layer sharing
        for strategy, sharing in _SHARING.items():
            rows[4][f"e{embedding}-{strategy}"] = dict(
                model=dict(embedding_size=embedding, sharing=sharing))
    for objective in ("none", "nsp", "sop"):  # Table 5: sentence-prediction loss
        rows[5][objective] = dict(model={}, sentence_objective=objective)
    previous = ""
    for depth in (1, 3, 6, 12, 24, 48):  # Table 11: depth, each warm-started from the last
        rows[11][f"l{depth}"] = dict(model=dict(num_hidden_layers=depth), warm_start_from=previous)
        previous = f"l{depth}"
    for hidden in (1024, 2048, 4096, 6144):  # Table 12: width of a 3-layer ALBERT-large
        rows[12][f"h{hidden}"] = dict(model=dict(num_hidden_layers=3, hidden_size=hidden))
    return rows


TABLES = _table_rows()

# The paper's numbers (SPEC 10): params as printed, then its columns. SQuAD is F1/EM.
_DOWNSTREAM = ("SQuAD1.1", "SQuAD2.0", "MNLI", "SST-2", "RACE", "Avg")
PAPER_COLUMNS = {3: ("params",) + _DOWNSTREAM, 4: ("params",) + _DOWNSTREAM,
                 5: ("MLM", "NSP", "SOP") + _DOWNSTREAM, 11: ("params", "Avg"),
                 12: ("params", "Avg")}
PAPER: dict[int, dict[str, tuple[str | float, ...]]] = {
    3: {"not-shared-e64": ("87M", "89.9/82.9", "80.1/77.8", 82.9, 91.5, 66.7, 81.3),
        "not-shared-e128": ("89M", "89.9/82.8", "80.3/77.3", 83.7, 91.5, 67.9, 81.7),
        "not-shared-e256": ("93M", "90.2/83.2", "80.3/77.4", 84.1, 91.9, 67.3, 81.8),
        "not-shared-e768": ("108M", "90.4/83.2", "80.4/77.6", 84.5, 92.8, 68.2, 82.3),
        "all-shared-e64": ("10M", "88.7/81.4", "77.5/74.8", 80.8, 89.4, 63.5, 79.0),
        "all-shared-e128": ("12M", "89.3/82.3", "80.0/77.1", 81.6, 90.3, 64.0, 80.1),
        "all-shared-e256": ("16M", "88.8/81.5", "79.1/76.3", 81.5, 90.3, 63.4, 79.6),
        "all-shared-e768": ("31M", "88.6/81.5", "79.2/76.6", 82.0, 90.6, 63.3, 79.8)},
    4: {"e768-all-shared": ("31M", "88.6/81.5", "79.2/76.6", 82.0, 90.6, 63.3, 79.8),
        "e768-shared-attention": ("83M", "89.9/82.7", "80.0/77.2", 84.0, 91.4, 67.7, 81.6),
        "e768-shared-ffn": ("57M", "89.2/82.1", "78.2/75.4", 81.5, 90.8, 62.6, 79.5),
        "e768-not-shared": ("108M", "90.4/83.2", "80.4/77.6", 84.5, 92.8, 68.2, 82.3),
        "e128-all-shared": ("12M", "89.3/82.3", "80.0/77.1", 82.0, 90.3, 64.0, 80.1),
        "e128-shared-attention": ("64M", "89.9/82.8", "80.7/77.9", 83.4, 91.9, 67.6, 81.7),
        "e128-shared-ffn": ("38M", "88.9/81.6", "78.6/75.6", 82.3, 91.7, 64.4, 80.2),
        "e128-not-shared": ("89M", "89.9/82.8", "80.3/77.3", 83.2, 91.5, 67.9, 81.6)},
    5: {"none": (54.9, 52.4, 53.3, "88.6/81.5", "78.1/75.3", 81.5, 89.9, 61.7, 79.0),
        "nsp": (54.5, 90.5, 52.0, "88.4/81.5", "77.2/74.6", 81.6, 91.1, 62.3, 79.2),
        "sop": (54.0, 78.9, 86.5, "89.3/82.3", "80.0/77.1", 82.0, 90.3, 64.0, 80.1)},
    11: {"l1": ("18M", 52.9), "l3": ("18M", 71.2), "l6": ("18M", 77.2), "l12": ("18M", 81.5),
         "l24": ("18M", 82.1), "l48": ("18M", 81.8)},
    12: {"h1024": ("18M", 71.2), "h2048": ("60M", 74.6), "h4096": ("225M", 76.3),
         "h6144": ("499M", 74.0)},
}

# Demo scale: the width the base model's H becomes (E and I follow in proportion), and depth.
DEMO_WIDTH = {"base": 128, "large": 128}
DEMO_HEADS = 2
# Depths of the demo: the base models' 12 and 24 layers -> 4, as in the `demo` preset; Table
# 11's 1..48 -> 1..8 (48 layers are 12x the compute of 4 on a CPU); Table 12 keeps its 3.
DEMO_DEPTH = {12: 4, 24: 4}
DEMO_DEPTH_TABLE_11 = {1: 1, 3: 2, 6: 3, 12: 4, 24: 6, 48: 8}
# Sized so that Table 5 x 3 seeds (9 pretrainings, 18 evaluations, 9 fine-tunings, 3 datasets)
# fits 30 minutes on an idle 2-core CPU: a row pretrains at ~3.9 steps/s there and spends ~70 s
# more on evaluation and fine-tuning; 600 steps made it ~35 minutes (README has the time measured).
DEMO_STEPS = dict(total_steps=400, batch_size=32, seq_len=64, warmup_steps=40, lr=3e-3)
DEMO_FINETUNE_STEPS = 200  # the paraphrase task of finetune/demo.py


def _pretrain_config(arg: str) -> ml_collections.ConfigDict:
    """configs/pretrain.py beside this file, with `arg`."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrain.py")
    spec = importlib.util.spec_from_file_location("_albert_jax_pretrain_config", path)
    assert spec is not None and spec.loader is not None  # a .py path has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def row_model_fields(table: int, row: str, scale: str) -> dict:
    """The model fields (over the base preset) of a row: the base model with the row's change,
    shrunk for `scale=demo` (widths in proportion, DEMO_HEADS, DEMO_DEPTH)."""
    base = TABLE_BASE[table]
    fields = dict(BASE[base], **TABLES[table][row]["model"])
    fields["intermediate_size"] = 4 * fields["hidden_size"]  # SPEC 7.1: I = 4H in every preset
    if scale == "paper":
        if base == "large" and fields["hidden_size"] > 1024:
            # Table 12's wider nets keep 64-dimensional heads, as xlarge/xxlarge (SPEC 7.1).
            fields["num_attention_heads"] = fields["hidden_size"] // 64
        return fields
    ratio = DEMO_WIDTH[base] / BASE[base]["hidden_size"]
    depths = DEMO_DEPTH_TABLE_11 if table == 11 else DEMO_DEPTH
    return dict(fields, hidden_size=round(fields["hidden_size"] * ratio),
                embedding_size=max(1, round(fields["embedding_size"] * ratio)),
                intermediate_size=round(fields["intermediate_size"] * ratio),
                num_attention_heads=DEMO_HEADS,
                num_hidden_layers=depths.get(fields["num_hidden_layers"],
                                             fields["num_hidden_layers"]))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, table=5, row="", scale="paper")
    if args.table not in TABLES:
        raise ConfigError(f"configs/ablation.py: table={args.table} is not an ablation table; "
                          f"choose one of {sorted(TABLES)}")
    rows = TABLES[args.table]
    row = args.row or next(iter(rows))
    if row not in rows:
        raise ConfigError(f"configs/ablation.py: table {args.table} has no row {row!r}; its rows: "
                          f"{', '.join(rows)}")
    if args.scale not in ("paper", "demo"):
        raise ConfigError(f"configs/ablation.py: scale={args.scale!r}; choose paper or demo")
    demo = args.scale == "demo"
    config = _pretrain_config("runlocal" if demo else f"size={TABLE_BASE[args.table]}")
    config.unlock()
    config.model = f"albert-{TABLE_BASE[args.table]}-v2"
    for key, value in row_model_fields(args.table, row, args.scale).items():
        config.model_overrides[key] = value
    config.data.sentence_objective = rows[row].get("sentence_objective", "sop")
    if demo:
        config.model_overrides.vocab_size = config.data.vocab_size
        config.model_overrides.max_position_embeddings = 128
        config.seq_len, config.batch_size = DEMO_STEPS["seq_len"], DEMO_STEPS["batch_size"]
        config.total_steps = DEMO_STEPS["total_steps"]
        config.optim.lr, config.optim.warmup_steps = DEMO_STEPS["lr"], DEMO_STEPS["warmup_steps"]
        config.eval_every_steps = config.total_steps  # the runner evaluates at the end anyway
        config.checkpoint_every_steps = config.log_every_steps = config.total_steps // 4

    config.ablation = ml_collections.ConfigDict()
    config.ablation.table = args.table
    config.ablation.row = row
    config.ablation.scale = args.scale
    config.ablation.warm_start_from = rows[row].get("warm_start_from", "")
    # Downstream: the demo's paraphrase task (finetune/demo.py) at demo scale; at paper scale
    # the fine-tuning config files named here, each from the row's checkpoint, with the
    # settings of `ablation.downstream_data.<task>` ("data.path=DIR" or, for SQuAD,
    # "data.train_file=F,data.dev_file=F"); a task without settings is skipped.
    config.ablation.finetune_steps = DEMO_FINETUNE_STEPS
    config.ablation.downstream = ("paraphrase",) if demo else (
        "configs/squad.py:version=1.1", "configs/glue.py:task=mnli", "configs/glue.py:task=sst2",
        "configs/race.py")
    config.ablation.downstream_data = ml_collections.ConfigDict(
        {"squad": "", "mnli": "", "sst2": "", "race": ""})
    # (column, value) pairs: column names such as "SQuAD1.1" cannot be ConfigDict keys.
    config.ablation.paper = tuple(zip(PAPER_COLUMNS[args.table], PAPER[args.table][row]))
    config.lock()
    return config
