"""Fine-tuning on your own data: classification, regression or multiple choice over CSV, TSV,
JSON Lines or Parquet files (finetune/core/tables.py reads them, in the columns
finetune/custom/data.py takes from this config); tagging over CoNLL, JSON Lines or Parquet files
(finetune/custom/tagging_data.py).

  albert-jax finetune --config=configs/custom.py:kind=classification \
      --config.data.train_file=train.csv --config.data.dev_file=dev.csv \
      --config.data.text_a=review --config.init_from=albert_base/ --workdir=runs/reviews
  albert-jax finetune --config=configs/custom.py:kind=multiple_choice \
      --config.data.train_file=train.jsonl --config.data.dev_file=dev.jsonl \
      --config.data.options=option_a,option_b,option_c --config.init_from=... --workdir=...

The argument: `kind=classification|regression|multiple_choice|token_classification`
(required), `size=base|large|xlarge|xxlarge` or `model=<preset>` (only for a from-scratch run:
with `init_from` the architecture comes from the checkpoint), `runlocal` (tiny sizes for a
laptop CPU).

Columns (`--config.data.<key>=<column name>`):
  classification, regression: text_a (default "text"), text_b ("" = one text), label ("label"),
    id ("" = the 0-based row number); classification also labels: the label list in class
    order, as a comma list or a JSON list ("" = the sorted set of the training labels).
  multiple_choice: context ("context"), question ("question"), either may be ""; options
    ("options"): one column holding a list of options, or a comma list of one column per
    option; label ("label"): the 0-based index of the right option or its text; id.
  token_classification: CoNLL files (.conll, .txt: a token and its tag per line, the tag in
    column tag_column, -1 = the last) or tables (.jsonl, .parquet) with tokens ("tokens") and
    tags ("tags") lists, id; tag_scheme (iob2, iob1, bioes), labels (the IOB2 tag list; "" =
    "O" + the sorted training tags), label_all_pieces, doc_stride (windows of a long sentence).
The best checkpoint has the largest dev `selection_metric`: accuracy, macro_f1 or mcc
(classification), pearson or spearman (regression), accuracy (multiple choice), f1, precision,
recall or accuracy (token_classification: entity scores as seqeval's, word accuracy).
"""
from __future__ import annotations

import ml_collections

from albert_jax.config import finetune_config, parse_arg, shrink_finetune_config
from albert_jax.errors import ConfigError

# kind -> (lr, batch, steps, warmup, selection metric). The steps suit a few thousand to a few
# tens of thousands of examples: raise total_steps (and warmup, ~10%) for bigger data.
# Classification and regression: the small GLUE tasks' run_glue.sh settings (SPEC 8.2: MRPC and
# STS-B lr 2e-5; MRPC batch 32, 800 steps, warmup 200; STS-B 3598 steps, warmup 214) and their
# selection metrics (accuracy; pearson as STS-B). Multiple choice: RACE's v2 settings (SPEC 8.4:
# lr 1e-5, batch 32, dropout 0, max_qa_length 128), with 2000 steps instead of RACE's 12000
# (88k questions).
HYPER_PARAMETERS = {
    "classification": (2e-5, 32, 2000, 200, "accuracy"),
    "regression": (2e-5, 32, 2000, 200, "pearson"),
    "multiple_choice": (1e-5, 32, 2000, 200, "accuracy"),
    # Tagging: run_ner.py's learning rate (5e-5) and batch 32; entity F1 (seqeval) selects.
    "token_classification": (5e-5, 32, 2000, 200, "f1"),
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, kind="", size="base", model="", runlocal=False)
    if args.kind not in HYPER_PARAMETERS:
        raise ConfigError(f"configs/custom.py needs kind=<kind>, one of "
                          f"{', '.join(HYPER_PARAMETERS)} (got {args.kind!r})")
    config = finetune_config(args)
    config.task = args.kind
    (config.optim.lr, config.batch_size, config.total_steps, config.optim.warmup_steps,
     config.selection_metric) = HYPER_PARAMETERS[args.kind]
    config.dropout = 0.0  # SPEC 8.2 / 8.4: ALBERT v2 fine-tunes without encoder dropout.
    config.eval_every_steps = config.checkpoint_every_steps = 100  # SPEC 8.1 (run_glue.sh)

    # Your own files, not a task folder or a TFDS dataset.
    del config.data.path, config.data.tfds_name, config.data.tfds_data_dir
    config.data.train_file = ""  # .csv, .tsv, .jsonl, .parquet, a `datasets` folder or .arrow
    config.data.dev_file = ""
    config.data.test_file = ""  # optional; its labels too
    # Or a HuggingFace dataset by name (datasets.load_dataset; offline: its cache): then
    # train_file, dev_file and test_file name its splits (default train, validation; no test).
    config.data.hf_dataset = ""
    config.data.hf_config = ""  # the dataset's configuration, where it has several
    config.data.id = ""
    if args.kind == "token_classification":
        config.data.tokens = "tokens"  # .jsonl / .parquet: the list of words
        config.data.tags = "tags"  # and the list of their tags
        config.data.tag_column = -1  # .conll / .txt: the tag's column, 0-based (-1: the last)
        config.data.tag_scheme = "iob2"  # or iob1, bioes: read as such, kept as IOB2
        config.data.labels = ""  # the IOB2 tags in class order; "": "O" + the training tags
        config.data.label_all_pieces = False  # True: every piece of a word carries its tag
        config.data.doc_stride = 128  # a longer sentence: windows this many pieces apart
    else:
        config.data.label = "label"
    if args.kind == "multiple_choice":
        config.data.context = "context"
        config.data.question = "question"
        config.data.options = "options"
        config.max_qa_length = 128  # SPEC 8.4: question + option keep their last 128 tokens
        config.eval_batch_size = 16  # each question is num_choices rows
    elif args.kind != "token_classification":
        config.data.text_a = "text"
        config.data.text_b = ""
        if args.kind == "classification":
            config.data.labels = ""
    if args.runlocal:
        config.model = args.model or "tiny"
        shrink_finetune_config(config)
        if args.kind == "multiple_choice":
            config.max_qa_length = 24
        if args.kind == "token_classification":
            config.data.doc_stride = 16
    config.lock()
    return config
