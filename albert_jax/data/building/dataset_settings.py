"""What a built pretraining dataset is: the settings that change its examples, and its folder.

  dataset_settings.dataset_dir(config)   # <config.data.dir>/albert_pretraining/<name>/2.0.0

`DatasetSettings` is the TFDS builder config of `builder.AlbertPretraining` (not the run config,
which it is made from). Its name ends in a hash of everything that changes the data (the corpus
files' names and sizes, the tokenizer file's bytes and text settings, seq_len, masking and
instance settings, dupe_factor, seed, format), so two different run configs never share a
folder, and a finished folder is reused as is (also from another machine where the corpus
lies under another path). The builder writes the data; the pipeline and `data inspect` find it
here, without the builder.

It holds the tokenizer's `TextSettings` and the corpus's `ReadSettings` whole (`text`,
`reading`); its metadata and its name see their fields flat (`as_dict`), as they were before
the records existed, so every dataset keeps its folder and bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import platform
from typing import Any

import ml_collections
import tensorflow_datasets as tfds
from etils import epath

from albert_jax.data import corpus
from albert_jax.data.building.instances import SENTENCE_OBJECTIVES
from albert_jax.data.corpus import Group, ReadSettings
from albert_jax.data.tokenizers import COMMA_RULES, TextSettings, tokenizer_kind
from albert_jax.errors import ConfigError

NAME = "albert_pretraining"  # the TFDS name of `builder.AlbertPretraining`
DATASET_VERSION = "2.0.0"
FORMATS = ("array_record", "tfrecord")
_TFDS_FIELDS = frozenset(field.name for field in dataclasses.fields(tfds.core.BuilderConfig))
# The records held whole, seen flat in the metadata and the name. The tokenizer's kind is left
# out: its bytes (tokenizer_sha256) decide it.
_FLAT_RECORDS = {"text": ("do_lower_case", "keep_accents", "comma_rule", "word_boundaries"),
                 "reading": tuple(field.name for field in dataclasses.fields(ReadSettings))}
# Text settings that joined after datasets were built: at their defaults a build's metadata
# leaves them out, so those datasets keep their bytes.
_TEXT_KEYS_OMITTED_AT_DEFAULT = {"keep_accents": False, "word_boundaries": "reference"}
# Fields that joined after datasets were built: at their defaults (a plain corpus) a build's
# metadata leaves them out, so those datasets keep their bytes.
_FIELDS_OMITTED_AT_DEFAULT = {"mixture": "", "mixture_alpha": None}
# Keys that joined the identity after datasets were built: at their defaults they are left out
# of a dataset's name and description, so those datasets keep their folders.
_LATER_KEYS = (dataclasses.asdict(ReadSettings()) | {"segmenter": "", "byte_ranges": False}
               | _TEXT_KEYS_OMITTED_AT_DEFAULT | _FIELDS_OMITTED_AT_DEFAULT)


@dataclasses.dataclass(eq=False)
class DatasetSettings(tfds.core.BuilderConfig):
    """Everything that changes the written examples; `name` is derived from it by
    `from_run_config`. A build stores these fields in its metadata as `settings` (`as_dict`)."""
    corpus: str = corpus.DEMO
    corpus_signature: str = ""  # file names and sizes (a changed file gets a new folder)
    tokenizer: str = ""
    tokenizer_sha256: str = ""
    text: TextSettings = TextSettings()  # how the tokenizer turns text into ids
    seq_len: int = 512
    max_predictions: int = 20
    masked_lm_prob: float = 0.15
    max_ngram: int = 3
    favor_shorter_ngram: bool = True
    short_seq_prob: float = 0.1
    dupe_factor: int = 40
    sentence_objective: str = "sop"
    reference_compat: bool = False
    eval_fraction: float = 0.01
    unit_bytes: int = 32 << 20  # corpus text per build unit (blocks and seeds are per unit)
    reading: ReadSettings = ReadSettings()  # how the corpus's text becomes documents
    # The segmenter's library and version where the build cuts sentences with it ("": it does
    # not): another version may cut them otherwise, so it gets its own folder.
    segmenter: str = ""
    # Whether a text or JSON Lines file is cut into byte ranges (parts.cut_into_byte_ranges):
    # such a file was one unit in builds before files were cut, and its examples differ, so
    # its build gets a folder of its own (a resumed old build never mixes with new units).
    byte_ranges: bool = False
    # A mixture's groups (`corpus.mixture_identity`: name, language, number of sources each) and
    # data.mixture_alpha; "" and None for a plain corpus.
    mixture: str = ""
    mixture_alpha: float | None = None
    seed: int = 12345
    file_format: str = "array_record"

    @classmethod
    def from_run_config(cls, config: ml_collections.ConfigDict, *,
                        groups: list[Group] | None = None) -> "DatasetSettings":
        """The dataset settings of a run config; checks the values and the tokenizer file first.
        `groups`: `corpus.corpus_groups` of config.data.corpus, where the caller has them."""
        data = config.data
        _check_settings(config)
        alpha = float(data.get("mixture_alpha", corpus.MIXTURE_ALPHA))
        corpus.check_alpha(alpha)
        reading = corpus.ReadSettings.from_config(data)
        tokenizer_path = epath.Path(data.tokenizer)
        if not tokenizer_path.exists():
            raise FileNotFoundError(
                f"config.data.tokenizer={data.tokenizer!r} does not exist; train one with "
                f"`albert-jax tokenizer train --config=...` (same config) or point "
                f"--config.data.tokenizer at a SentencePiece model such as 30k-clean.model or a "
                f"WordPiece vocab.txt")
        groups = corpus.corpus_groups(data.corpus, reading) if groups is None else groups
        sources = corpus.flat_sources(groups)
        tokenizer_bytes = tokenizer_path.read_bytes()
        text = dataclasses.replace(TextSettings.from_config(data),
                                   kind=tokenizer_kind(os.fspath(data.tokenizer), tokenizer_bytes))
        settings = cls(
            name="", corpus=data.corpus, corpus_signature=_corpus_signature(sources),
            tokenizer=os.fspath(data.tokenizer),
            tokenizer_sha256=hashlib.sha256(tokenizer_bytes).hexdigest(), text=text,
            seq_len=int(config.seq_len),
            max_predictions=int(data.max_predictions), masked_lm_prob=float(data.masked_lm_prob),
            max_ngram=int(data.max_ngram), favor_shorter_ngram=bool(data.favor_shorter_ngram),
            short_seq_prob=float(data.short_seq_prob), dupe_factor=int(data.dupe_factor),
            sentence_objective=str(data.sentence_objective),
            reference_compat=bool(data.reference_compat), eval_fraction=float(data.eval_fraction),
            unit_bytes=int(data.unit_bytes), reading=reading,
            segmenter=_segmenter_identity(reading, sources),
            byte_ranges=any(corpus.cut_into_byte_ranges(source, size, int(data.unit_bytes))
                            for source, size in sources),
            mixture=corpus.mixture_identity(groups),
            mixture_alpha=alpha if corpus.is_mixture(groups) else None,
            seed=int(config.seed if data.get("seed") is None else data.seed),
            file_format=str(data.format))
        fields = settings.as_dict()
        # Paths are not part of the identity: a moved corpus or a copied tokenizer file (same
        # names, sizes and bytes) gives the same data, so it finds the same folder. Nor are the
        # reading keys at their defaults: a text corpus keeps the folder it had before they were.
        identity = {key: value for key, value in fields.items()
                    if key not in ("corpus", "tokenizer")
                    and not (key in _LATER_KEYS and value == _LATER_KEYS[key])}
        digest = hashlib.sha256(repr(sorted(identity.items())).encode()).hexdigest()[:12]
        settings.name = (f"seq{settings.seq_len}_pred{settings.max_predictions}_"
                         f"dupe{settings.dupe_factor}_{settings.sentence_objective}_{digest}")
        # Short whatever the corpus: TFDS logs it and stores it in dataset_info.json; the full
        # settings (every file's name and size) are in the metadata.
        settings.description = f"{corpus.describe(data.corpus, sources)}; " + ", ".join(
            f"{key}={value!r}" for key, value in fields.items()
            if key not in ("corpus", "corpus_signature", "tokenizer_sha256")
            and not (key in _LATER_KEYS and value == _LATER_KEYS[key]))
        return settings

    def __repr__(self) -> str:  # (not the dataclass's: TFDS logs it, and a signature is long)
        return f"DatasetSettings({self.name}: {self.description})"

    def as_dict(self) -> dict[str, Any]:
        """The fields above in order (not TFDS's own: name, version, ...), the records' fields
        flat in their place, as a build stores them in its metadata under `settings`."""
        fields: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in _FLAT_RECORDS:
                fields.update((key, getattr(value, key)) for key in _FLAT_RECORDS[field.name]
                              if _TEXT_KEYS_OMITTED_AT_DEFAULT.get(key, ...) != getattr(value, key))
            elif field.name not in _TFDS_FIELDS and _FIELDS_OMITTED_AT_DEFAULT.get(
                    field.name, ...) != value:
                fields[field.name] = value
        return fields


def dataset_dir(config: ml_collections.ConfigDict) -> str:
    """The folder holding dataset_info.json for `config` (whether built or not yet).

    Same as `builder.make_builder(config).data_dir`, without constructing a TFDS builder."""
    return os.fspath(epath.Path(config.data.dir) / NAME
                     / DatasetSettings.from_run_config(config).name / DATASET_VERSION)


def _check_settings(config: ml_collections.ConfigDict) -> None:
    data = config.data
    problems = []
    if config.seq_len < 8:
        problems.append(f"seq_len={config.seq_len} (need >= 8: [CLS] A [SEP] B [SEP])")
    if data.max_predictions < 1:
        problems.append(f"data.max_predictions={data.max_predictions} (need >= 1)")
    if not 0.0 < data.masked_lm_prob <= 1.0:
        problems.append(f"data.masked_lm_prob={data.masked_lm_prob} (need 0 < p <= 1)")
    if data.max_ngram < 1:
        problems.append(f"data.max_ngram={data.max_ngram} (need >= 1)")
    if not 0.0 <= data.short_seq_prob <= 1.0:
        problems.append(f"data.short_seq_prob={data.short_seq_prob} (need 0 <= p <= 1)")
    if data.dupe_factor < 1:
        problems.append(f"data.dupe_factor={data.dupe_factor} (need >= 1)")
    if data.sentence_objective not in SENTENCE_OBJECTIVES:
        problems.append(f"data.sentence_objective={data.sentence_objective!r} "
                        f"(one of {SENTENCE_OBJECTIVES})")
    if not 0.0 <= data.eval_fraction < 1.0:
        problems.append(f"data.eval_fraction={data.eval_fraction} (need 0 <= f < 1)")
    if data.unit_bytes < 1:
        problems.append(f"data.unit_bytes={data.unit_bytes} (need >= 1: bytes of corpus text "
                        f"per build unit)")
    if data.comma_rule not in COMMA_RULES:
        problems.append(f"data.comma_rule={data.comma_rule!r} (one of {COMMA_RULES})")
    if data.format not in FORMATS:
        problems.append(f"data.format={data.format!r} (one of {FORMATS})")
    if problems:
        raise ConfigError("cannot build pretraining data: " + "; ".join(problems))
    if data.format == "tfrecord":
        try:
            import tensorflow  # noqa: F401  (TFDS writes TFRecord files through TensorFlow)
        except ImportError:
            raise ConfigError(
                "config.data.format='tfrecord' needs TensorFlow: `pip install albert-jax[tf]`, or "
                "keep the default 'array_record' (what the grain pipeline reads)") from None


def _segmenter_identity(reading: corpus.ReadSettings,
                        sources: list[tuple[str, int | None]]) -> str:
    """The segmenter library and its version if any source's sentences are cut by it, else ""."""
    if any(corpus.uses_segmenter(source, reading) for source, _ in sources):
        return f"sentencex {importlib.metadata.version('sentencex')}"
    return ""


def _corpus_signature(sources: list[tuple[str, int | None]]) -> str:
    """The corpus sources in order (`corpus.sized_sources`): file names with sizes (local or in
    a bucket: the same files give the same signature), TFDS names, or the demo corpus with the
    Python version it comes from."""
    parts = []
    for source, size in sources:
        if source == corpus.DEMO:
            parts.append(f"{source}@python{platform.python_version()}")
        elif size is None:
            parts.append(source)
        else:
            parts.append(f"{os.path.basename(source)}:{size}")
    return ";".join(parts)
