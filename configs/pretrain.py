"""ALBERT pretraining (paper §4.1, SPEC 6.6): n-gram MLM + SOP with LAMB.

  albert-jax pretrain --config=configs/pretrain.py:size=base --workdir=DIR
  albert-jax pretrain --config=configs/pretrain.py:runlocal --workdir=runs/demo   # laptop CPU

The argument is a comma-separated list: `size=base|large|xlarge|xxlarge` (ALBERT v2 presets),
`model=<any preset name>` (e.g. albert-base-v1, bert-base), `runlocal` (shrink everything for
a laptop CPU: the demo model on the demo corpus), `multilingual` (the text settings a model of
many languages wants: `MULTILINGUAL`, each key still overridable on the command line).
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from albert_jax.config import (
    add_compilation_cache,
    add_watching,
    model_overrides_placeholder,
    parse_arg,
)

# What `multilingual` sets, and why (docs/pretraining.md "Many languages"): the marks of most
# scripts kept (SPEC 2.2 strips Hindi viramas, Thai tones, Japanese dakuten); case kept (cased
# scripts differ in how they case, and many scripts have none); whole words found where the text
# has spaces, in every script (SPEC 1.4.2 calls every non-Latin piece a word start); the
# vocabulary trained over more characters (mT5 and XLM-R's SentencePiece setting) with bytes for
# the rest, so no text becomes <unk>; a mixture's small languages sampled up as XLM-R and mT5 do
# (alpha 0.3; mBERT's 0.7 is the default).
MULTILINGUAL = {"keep_accents": True, "do_lower_case": False, "word_boundaries": "spaces",
                "character_coverage": 0.9995, "byte_fallback": True, "mixture_alpha": 0.3}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = parse_arg(arg, size="base", model="", runlocal=False, multilingual=False)
    config = ml_collections.ConfigDict()
    config.model = args.model or f"albert-{args.size}-v2"
    # Any model field, e.g. --config.model_overrides.num_hidden_layers=24; None keeps the preset.
    config.model_overrides = model_overrides_placeholder()
    config.compute_dtype = "float32"  # or "bfloat16" (float32 accumulation, float32 params)
    add_compilation_cache(config)  # compilation_cache: a directory, or "" for off

    # SPEC 6.6: batch 4096 x seq 512, 125k steps; 20 predictions per sequence.
    config.seed = 12345  # SPEC 1.1 random_seed
    config.seq_len = 512
    config.batch_size = 4096  # global, over all hosts
    config.num_microbatches = 1  # gradient accumulation: batch_size / num_microbatches per pass
    config.total_steps = 125_000

    config.optim = ml_collections.ConfigDict()
    config.optim.name = "lamb"  # SPEC 6.3; "adamw" is SPEC 6.4
    config.optim.lr = 0.00176
    config.optim.warmup_steps = 3125
    config.optim.schedule = "reference"  # warmup then (1 - step/T)^power from step 0 (SPEC 6.1)
    config.optim.power = 1.0
    config.optim.weight_decay = 0.01
    config.optim.beta_1 = 0.9
    config.optim.beta_2 = 0.999
    config.optim.epsilon = 1e-6
    config.optim.clip_norm = 1.0  # SPEC 6.2: global norm, before the optimizer

    config.data = ml_collections.ConfigDict()
    # Globs, folders or comma lists of files (local or gs://): text, JSON Lines (.jsonl, .json)
    # or Parquet, each optionally .gz/.zst/.xz/.bz2; a HuggingFace save_to_disk folder;
    # "hf:NAME[/CONFIG][:SPLIT]" (a hub dataset's Parquet files in the local HF cache, offline);
    # a TFDS text dataset name; or "demo" (docs/pretraining.md "Your corpus").
    config.data.corpus = "demo"
    # A mixture of languages is a dict of group name (a language code, or any name) -> corpus
    # spec, e.g. "{'hi': 'wiki/hi/*.parquet', 'en': 'hf:wikimedia/wikipedia/20231101.en'}";
    # a group of p_i of the characters is sampled with q_i = p_i^alpha / sum_j p_j^alpha, by
    # `data build` (each document dupe_factor x q_i/p_i times) and `tokenizer train`. 0.7 is
    # mBERT's; 0.3 XLM-R's and mT5's; 1: as large as the groups are; 0: every group equal.
    config.data.mixture_alpha = 0.7
    # How the corpus's text becomes documents of sentences (albert_jax/data/corpus/settings.py):
    config.data.text_column = "text"  # the record field with the text (OSCAR's is "content")
    # "blank_lines": a blank line ends a document; "records": each Parquet row, JSON line, HF or
    # TFDS example is one document. "": the format's own (blank_lines for text files, records for
    # the others).
    config.data.documents = ""
    # "lines": each non-empty line is one sentence (SPEC 1.2); "segmenter": each line is a
    # paragraph, cut into sentences in data.language. "": the format's own (lines for text
    # files, segmenter for the others).
    config.data.sentences = ""
    config.data.language = "en"  # the ISO 639 code of the segmenter's rules
    config.data.language_column = ""  # a record field with each record's language ("": none)
    config.data.tokenizer = "runs/tokenizer/spm.model"  # SentencePiece model (SPEC 2.1)
    # What `albert-jax tokenizer train` writes: "sentencepiece" (a .model) or "wordpiece" (a BERT
    # vocab.txt, SPEC 2.5). Loading goes by the file: a .model is SentencePiece, else WordPiece.
    config.data.tokenizer_kind = "sentencepiece"
    # `tokenizer train` reads the corpus's files in a seeded order until it has this many
    # sentences (SentencePiece's input_sentence_size), so a TB corpus is not read whole.
    config.data.input_sentence_size = 10_000_000
    config.data.vocab_size = 30000
    # SentencePiece training (SPEC 2.1): the share of the text's characters the model covers
    # (lower, e.g. 0.9995, for scripts with thousands of rare characters), and whether a
    # character outside the vocabulary becomes its UTF-8 bytes (<0xE0>...) instead of <unk>.
    config.data.character_coverage = 0.99995
    config.data.byte_fallback = False
    config.data.dir = "runs/data"  # the TFDS data_dir the build writes into (local or gs://)
    # With a gs:// data.dir, each build worker writes one shard at a time in a local folder and
    # uploads it when done (~shard_bytes of disk per worker); None: the system's temp folder.
    config.data.staging_dir = config_dict.placeholder(str)
    # With data.dir=gs://...: where each host copies the shards it reads (its train shards and
    # the eval split; albert_jax/data/input/shard_copy.py). Or mount the bucket (gcsfuse) as data.dir.
    config.data.local_dir = "~/.cache/albert_jax/data"
    config.data.format = "array_record"  # or "tfrecord"
    # Serialized examples per shard. With data.dir in a bucket read by per-host copies
    # (data.local_dir), every host reads shards of its own: a pod needs at least one train shard
    # per host.
    config.data.shard_bytes = 256 << 20
    # Corpus text per build unit: a unit (consecutive corpus files; a larger file cut into
    # byte ranges or Parquet row groups, albert_jax/data/corpus/parts.py) is
    # what one worker builds, retries or resumes; smaller units spread a build over more
    # workers and make more, smaller shards (docs/launching.md "Building data on Dataflow").
    config.data.unit_bytes = 32 << 20
    config.data.max_predictions = 20  # SPEC 1.1
    config.data.masked_lm_prob = 0.15
    config.data.max_ngram = 3
    config.data.favor_shorter_ngram = True
    config.data.short_seq_prob = 0.1
    config.data.dupe_factor = 40
    config.data.masking = "static"  # "static": masks from the shards; "dynamic": new each epoch
    config.data.sentence_objective = "sop"  # "sop" | "nsp" | "none" (paper Table 5 ablations)
    config.data.reference_compat = False  # True: SPEC 1.3.5a single-chunk quirk, as released
    config.data.do_lower_case = True
    # True: accents and every combining mark kept (SPEC 2.2 drops them: Hindi virama, Thai tone
    # marks, Japanese dakuten, Vietnamese tones)
    config.data.keep_accents = False
    config.data.comma_rule = "reference"  # SPEC 2.3 digit-comma rule; "hf": HuggingFace's
    # where whole words start for n-gram masking: "reference" (SPEC 1.4.2) or "spaces" (every
    # script)
    config.data.word_boundaries = "reference"
    config.data.eval_fraction = 0.01  # documents held out for the eval split
    config.data.shuffle_buffer_seed = config_dict.placeholder(int)  # None: derived from seed
    # The seed of the built examples (pairs, masks); None: config.seed. Fixed, runs of several
    # seeds share one dataset and differ only in init and order (albert-jax ablate --seeds).
    config.data.seed = config_dict.placeholder(int)
    config.data.num_workers = 0  # grain worker processes per host (0: in the main process)
    config.data.prefetch = 2

    config.mesh = ml_collections.ConfigDict()
    config.mesh.data = -1  # -1: all devices not used by the other axes
    config.mesh.fsdp = 1
    config.mesh.tensor = 1
    config.mesh.num_slices = 1  # TPU slices joined over the data-center network (DCN)
    config.mesh.dcn_data = -1  # slices the data axis spans (-1: those dcn_fsdp leaves)
    config.mesh.dcn_fsdp = 1  # slices fsdp spans: its all-gathers would cross DCN every layer

    config.log_every_steps = 100
    config.eval_every_steps = 5000
    config.eval_steps = 100  # SPEC 5.7: max_eval_steps 100 x eval batch
    config.eval_batch_size = 64
    config.checkpoint_every_steps = 5000
    config.keep_checkpoints = 3
    config.init_from = ""  # an Orbax checkpoint or workdir: weights only, fresh optimizer
    add_watching(config)  # report_to, mlflow.*, wandb.*, profile.* (docs/watching.md)

    if args.runlocal:
        # The demo: a 4-layer shared H=128 model on the stdlib-docstring corpus, a few minutes
        # on a laptop CPU. Docstring sentences are short, so seq 64 loses little text.
        config.model = args.model or "demo"
        config.seq_len = 64
        config.batch_size = 32
        config.total_steps = 800
        config.optim.lr = 3e-3
        config.optim.warmup_steps = 80
        config.data.vocab_size = 4000  # the demo corpus supports ~6.6k SentencePiece pieces
        config.data.dupe_factor = 4
        config.data.eval_fraction = 0.05
        config.log_every_steps = 50
        config.eval_every_steps = 200
        config.eval_steps = 50  # the whole eval split (~1.5k examples)
        config.eval_batch_size = 32
        config.checkpoint_every_steps = 200
    if args.multilingual:
        config.data.update(MULTILINGUAL)
    config.lock()
    return config
