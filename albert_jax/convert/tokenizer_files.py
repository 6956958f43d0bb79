"""The tokenizer that comes with a checkpoint: found beside it (an official TF checkpoint, a
HuggingFace folder, one of our workdirs) and carried with the weights `albert-jax convert` writes,
as a workdir's spiece.model / vocab.txt or as transformers tokenizer files.

  found = source_tokenizer("tf", "albert_base/model.ckpt-best", "albert_base/albert_config.json")
  carry_tokenizer("tf", path, config_path, "huggingface", "hf_out", model_max_length=512)
  write_huggingface_tokenizer(Tokenizer.load(found), "hf_out", model_max_length=512)

Fine-tuning's `init_from` finds a checkpoint's tokenizer with the same functions
(finetune/core/pretrained.py).
"""
from __future__ import annotations

import json
import os
from typing import Any

from etils import epath

from albert_jax import files
from albert_jax.data.tokenizers import (
    HF_SPM_FILE,
    TextSettings,
    Tokenizer,
    config_keys,
    hf_files,
    needs_comma_split,
    read_record,
    wordpiece,
)
from albert_jax.train import workdir as workdir_names

_TF_TOKENIZER_FILE = "30k-clean.model"  # the official TF releases (SPEC 2.1)
_HF_TOKENIZER_CONFIG = "tokenizer_config.json"  # what transformers' save_pretrained writes
_TF_VOCAB_FILE = "vocab_chinese.txt"  # the Chinese TF releases (SPEC 2.5)


def _first_existing(*paths: epath.Path) -> str | None:
    return next((os.fspath(path) for path in paths if path.exists()), None)


def workdir_tokenizer(path: epath.Path) -> str | None:
    """The tokenizer of one of our workdirs: its copy, else the file its config names."""
    for directory in (path, path.parent, path.parent.parent):  # workdir, checkpoints/, <step>/
        copy = workdir_names.tokenizer_path(directory)
        if copy is not None:
            return os.fspath(copy)
        if (directory / workdir_names.CONFIG_FILE).exists():
            saved = json.loads((directory / workdir_names.CONFIG_FILE).read_bytes())
            named = saved.get("tokenizer") or saved.get("data", {}).get("tokenizer")
            if named and epath.Path(named).exists():
                return named
    return None


def source_settings(source: str, path: str, tokenizer: str | None) -> dict[str, Any]:
    """The text settings of `tokenizer`, the tokenizer that came with the checkpoint at `path`
    (`albert-jax convert --from=<source>`; fine-tuning's init_from), by `TextSettings` field,
    only those something says (nothing without a tokenizer): the record beside the tokenizer
    (`read_record`) over a HuggingFace folder's tokenizer_config.json (`hf_settings`) or the
    data keys of a workdir's config.json. An official TF checkpoint says nothing: the defaults
    are its settings (the released models are uncased, SPEC 2.2)."""
    if tokenizer is None:
        return {}
    root = epath.Path(path)
    directory = root if root.is_dir() else root.parent
    known: dict[str, Any] = {}
    if source == "huggingface":
        config_path = directory / _HF_TOKENIZER_CONFIG
        config = json.loads(config_path.read_bytes()) if config_path.exists() else {}
        is_model = epath.Path(tokenizer).name == workdir_names.TOKENIZER_FILE  # else vocab.txt
        known = hf_settings(config, "sentencepiece" if is_model else "wordpiece")
    elif source == "orbax":
        for directory in (root, root.parent, root.parent.parent):  # workdir, checkpoints/, <step>/
            if (directory / workdir_names.CONFIG_FILE).exists():
                saved = json.loads((directory / workdir_names.CONFIG_FILE).read_bytes())
                known = config_keys(saved.get("data", {}))
                break
    return {**known, **(read_record(tokenizer) or {})}


def hf_settings(config: dict[str, Any], kind: str) -> dict[str, Any]:
    """The text settings a transformers tokenizer_config.json says, with transformers' defaults
    for the keys it lacks: do_lower_case (True), keep_accents (AlbertTokenizer's; a
    BertTokenizer's strip_accents=false), and for a SentencePiece model HuggingFace's digit-comma
    rule, which AlbertTokenizer always applies (SPEC 2.3)."""
    known = {"do_lower_case": bool(config.get("do_lower_case", True)),
             "keep_accents": bool(config.get("keep_accents", False))
             or config.get("strip_accents") is False}
    return {**known, "comma_rule": "hf"} if kind == "sentencepiece" else known


def _glob(directory: epath.Path, pattern: str) -> list[str]:
    """The paths in `directory` (local or gs://) that match `pattern`, sorted."""
    return sorted(os.fspath(path) for path in directory.glob(pattern))


def tf_tokenizer(directory: epath.Path) -> str | None:
    """The tokenizer beside a TF checkpoint: 30k-clean.model (the English releases), spiece.model,
    another .model, else a vocabulary: vocab.txt or the Chinese releases' vocab_chinese.txt
    (another vocab*.txt last)."""
    found = _first_existing(directory / _TF_TOKENIZER_FILE,
                            directory / workdir_names.TOKENIZER_FILE)
    found = found or next(iter(_glob(directory, "*.model")), None)
    found = found or _first_existing(directory / workdir_names.VOCAB_FILE,
                                     directory / _TF_VOCAB_FILE)
    return found or next(iter(_glob(directory, "vocab*.txt")), None)


def source_tokenizer(source: str, path: str, config_path: str | None) -> str | None:
    """The tokenizer that comes with the checkpoint `albert-jax convert --from=<source>` reads:
    beside a TF checkpoint (or its albert_config.json), in a HuggingFace folder, or one of our
    workdirs' (fine-tuning's `init_from` finds the same ones); None when there is none."""
    root = epath.Path(path)
    directory = root if root.is_dir() else root.parent
    if source == "tf":
        found = tf_tokenizer(directory)
        return found or (tf_tokenizer(epath.Path(config_path).parent) if config_path else None)
    if source == "huggingface":
        found = workdir_names.tokenizer_path(directory)
        return found and os.fspath(found)
    return workdir_tokenizer(root)


def huggingface_files(tokenizer: Tokenizer, model_max_length: int) -> dict[str, bytes]:
    """{file name: content} of `tokenizer` for a transformers model folder, so that
    `AutoTokenizer.from_pretrained(folder)` gives the ids of `tokenizer.encode`, with its casing
    and accents (`source_settings` reads them back from tokenizer_config.json):
    spiece.model and a tokenizer.json for AlbertTokenizerFast (`hf_files`), or a
    WordPiece vocabulary as BertTokenizerFast (`wordpiece.huggingface_files`), each with
    tokenizer_config.json and special_tokens_map.json. Says so when transformers cannot give
    all our ids: a run with the reference's digit-comma rule and pieces it re-encodes."""
    if tokenizer.kind == "wordpiece":
        return wordpiece.huggingface_files(tokenizer.id_to_piece(range(tokenizer.vocab_size)),
                                           tokenizer.settings,
                                           model_max_length=model_max_length)
    comma_pieces = [piece for piece in tokenizer.id_to_piece(range(tokenizer.vocab_size))
                    if needs_comma_split(piece)]
    if comma_pieces and tokenizer.settings.comma_rule == "reference":
        print(f"note: {len(comma_pieces)} pieces of {tokenizer.path} end in a digit and a comma "
              f"(e.g. {comma_pieces[0]!r}): transformers cuts them by HuggingFace's digit-comma "
              "rule, this run by the reference's (data.comma_rule=reference, SPEC 2.3), so ids "
              "differ where a digit is followed by a comma; fine-tune with "
              "data.comma_rule=hf for the same ids")
    return hf_files.huggingface_files(
        tokenizer.files(HF_SPM_FILE)[HF_SPM_FILE], tokenizer.settings,
        model_max_length=model_max_length, path=tokenizer.path)


def write_huggingface_tokenizer(tokenizer: Tokenizer, output: str, model_max_length: int) -> None:
    """Writes `huggingface_files(tokenizer, model_max_length)` into `output`."""
    for name, content in huggingface_files(tokenizer, model_max_length).items():
        files.write_atomically(os.fspath(epath.Path(output) / name), content)


def carry_tokenizer(source: str, path: str, config_path: str | None, target: str, output: str,
                    model_max_length: int) -> None:
    """`albert-jax convert`: keeps the tokenizer that came with the weights (beside a TF
    checkpoint, e.g. the Chinese models' vocab_chinese.txt, in a HuggingFace folder or a
    workdir) with the output: as the workdir's spiece.model / vocab.txt (an Orbax output, which
    `init_from` then finds), or as transformers tokenizer files. Says so either way."""
    found = source_tokenizer(source, path, config_path)
    if found is None:
        print(f"no tokenizer found with {path}; give fine-tuning one with --config.tokenizer")
        return
    tokenizer = Tokenizer.load(found, TextSettings(**source_settings(source, path, found)))
    if target == "huggingface":
        write_huggingface_tokenizer(tokenizer, output, model_max_length)
    else:
        for name, content in tokenizer.files(workdir_names.TOKENIZER_FILES[tokenizer.kind]).items():
            files.write_atomically(os.fspath(epath.Path(output) / name), content)
    casing = "lower-cased" if tokenizer.settings.do_lower_case else "cased"
    print(f"kept the {tokenizer.kind} tokenizer {found} ({tokenizer.vocab_size} pieces, {casing}) "
          f"with {output}")
