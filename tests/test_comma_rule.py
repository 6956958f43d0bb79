"""The SPEC 2.3 digit-comma rule of the tokenizer, both ways, against pieces worked out by hand
from the reference's `tokenization.py` `encode_pieces`; how a workdir records the rule, and how
data build and fine-tuning use it."""
import json
import logging
import random

import flax.linen as nn
import jax
import numpy as np
import pytest
import sentencepiece as spm

from albert_jax import pretraining
from albert_jax.convert import save_huggingface
from albert_jax.data.building import builder
from albert_jax.data.tokenizers import TextSettings, Tokenizer, preprocess_text, read_record, train
from albert_jax.errors import ConfigError
from albert_jax.finetune import run as finetune_run
from albert_jax.model import AlbertForPreTraining, presets
from albert_jax.train import checkpoint
from configs import glue as glue_config
from configs import pretrain as pretrain_config
from finetune_fixtures import write_glue_task

WORDS = ("the cat sat on mat and dog ran to park with more than you must pay about over people "
         "were").split()


def _number_sentences(count: int) -> list[str]:
    """Sentences with numbers followed by a comma, so the vocabulary gets digit-comma pieces."""
    rng = random.Random(0)
    sentences = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        number = rng.choice([str(rng.randint(1, 9)), "12", "100",
                             f"{rng.randint(1, 9)},{rng.randint(0, 999):03d}",
                             f"{rng.randint(1, 9)},000,000"])
        sentences.append(f"{' '.join(words[:2])} {number}, {' '.join(words[2:])} page 12 and "
                         "100 people.")
    return sentences


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    # ALBERT's SentencePiece settings (SPEC 2.1), a vocabulary of 220 pieces.
    return train(_number_sentences(2000), str(tmp_path_factory.mktemp("spm") / "numbers.model"),
                 220)


@pytest.fixture(scope="module")
def tokenizers(model_path) -> dict[str, Tokenizer]:
    return {rule: Tokenizer.load(model_path, TextSettings(comma_rule=rule)) for rule in ("reference", "hf")}


def test_vocabulary_has_digit_comma_pieces(tokenizers):
    vocabulary = set(tokenizers["reference"].id_to_piece(range(tokenizers["reference"].vocab_size)))
    assert {"▁1,", "1,", "0,", "00,", "000,", "9,", "▁9,", "▁1", "1", "0", "9"} <= vocabulary


# (text, SentencePiece's pieces of the preprocessed text, pieces of the reference under Python 3,
# pieces of HuggingFace's AlbertTokenizer / the reference under Python 2). Worked out by hand from
# `encode_pieces`: each raw piece ending in digit + "," is re-encoded as piece[:-1] without "▁",
# which SentencePiece gives as noted; under Python 3 `piece[0] != SPIECE_UNDERLINE` compares str
# with bytes (always True) and `cur_pieces[0][0] == SPIECE_UNDERLINE` is always False, so the
# "▁" SentencePiece puts in front stays; under Python 2 it is dropped when `piece` did not start
# with "▁" (the whole first piece when it is "▁" alone, else its first character); then "," is
# appended.
CASES = [
    # "▁1," starts a word: "1" -> ["▁1"], nothing to drop under either rule.
    ("It cost 1, ok", ["▁", "i", "t", "▁", "c", "o", "s", "t", "▁1,", "▁o", "k"],
     ["▁", "i", "t", "▁", "c", "o", "s", "t", "▁1", ",", "▁o", "k"],
     ["▁", "i", "t", "▁", "c", "o", "s", "t", "▁1", ",", "▁o", "k"]),
    # Mid-word "0,": "0" -> ["▁", "0"]; Python 2 drops the lone "▁".
    ("x0, y", ["▁", "x", "0,", "▁", "y"],
     ["▁", "x", "▁", "0", ",", "▁", "y"],
     ["▁", "x", "0", ",", "▁", "y"]),
    # Mid-word "1,": "1" -> ["▁1"]; Python 2 strips its first character ("1").
    ("x1, y", ["▁", "x", "1,", "▁", "y"],
     ["▁", "x", "▁1", ",", "▁", "y"],
     ["▁", "x", "1", ",", "▁", "y"]),
    # The pattern ("more than 100,"): mid-word "00,": "00" -> ["▁", "0", "0"].
    ("x100, y", ["▁", "x", "1", "00,", "▁", "y"],
     ["▁", "x", "1", "▁", "0", "0", ",", "▁", "y"],
     ["▁", "x", "1", "0", "0", ",", "▁", "y"]),
    # "9," alone: "▁9," starts a word; "9" -> ["▁", "9"], kept under both rules.
    ("9,", ["▁9,"], ["▁", "9", ","], ["▁", "9", ","]),
    # After "(" (a user-defined symbol) "9," does not start a word.
    ("(9,5", ["▁", "(", "9,", "5"],
     ["▁", "(", "▁", "9", ",", "5"],
     ["▁", "(", "9", ",", "5"]),
    # "1,000,000,": "▁1," -> ["▁1"]; each "000," -> "000" -> ["▁", "0", "0", "0"].
    ("1,000,000,", ["▁1,", "000,", "000,"],
     ["▁1", ",", "▁", "0", "0", "0", ",", "▁", "0", "0", "0", ","],
     ["▁1", ",", "0", "0", "0", ",", "0", "0", "0", ","]),
]


@pytest.mark.parametrize("text, raw, reference, hf", CASES)
def test_digit_comma_rule_by_hand(tokenizers, text, raw, reference, hf):
    sp = spm.SentencePieceProcessor(model_proto=tokenizers["reference"]._model_proto)
    assert sp.encode(preprocess_text(text), out_type=str) == raw  # the case is what it says
    for rule, expected in (("reference", reference), ("hf", hf)):
        tokenizer = tokenizers[rule]
        assert tokenizer.pieces(text) == expected, rule
        # encode (fast path plus exact slow path) and encode_with_offsets agree with pieces.
        expected_ids = [sp.piece_to_id(piece) for piece in expected]
        assert tokenizer.encode(text).tolist() == expected_ids, rule
        ids, _, _ = tokenizer.encode_with_offsets(text)
        assert ids.tolist() == expected_ids, rule


def test_huggingface_tokenizer_is_the_hf_rule(model_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertTokenizer(model_path, do_lower_case=True, keep_accents=False)
    for text, _, _, hf_pieces in CASES:
        assert hf.tokenize(text) == hf_pieces, text


def test_offsets_of_the_extra_underline_are_empty(tokenizers):
    # encode_with_offsets: the "▁" the reference rule keeps covers nothing (an empty span where
    # the next character starts); every other span is the same under both rules.
    text = "x100,  Y (9,5"
    ids, starts, ends = tokenizers["reference"].encode_with_offsets(text)
    spans = [(piece, text[start:end], int(start)) for piece, start, end
             in zip(tokenizers["reference"].id_to_piece(ids), starts, ends)]
    added = [("▁", "", 2), ("▁", "", 10)]  # before the re-encoded "00" and "9"
    assert spans == [("▁", "", 0), ("<unk>", "x", 0), ("1", "1", 1), added[0], ("0", "0", 2),
                     ("0", "0", 3), (",", ",", 4), ("▁", "", 7), ("y", "Y", 7), ("▁", "", 9),
                     ("(", "(", 9), added[1], ("9", "9", 10), (",", ",", 11), ("5", "5", 12)]
    hf_ids, hf_starts, hf_ends = tokenizers["hf"].encode_with_offsets(text)
    hf_spans = [(piece, text[start:end], int(start)) for piece, start, end
                in zip(tokenizers["hf"].id_to_piece(hf_ids), hf_starts, hf_ends)]
    assert hf_spans == [span for index, span in enumerate(spans) if index not in (3, 11)]


def test_workdir_files_record_the_rule(tmp_path, tokenizers, model_path):
    assert Tokenizer.load(model_path).settings.comma_rule == "reference"  # no settings file: the default
    for rule, tokenizer in tokenizers.items():
        workdir = tmp_path / rule
        workdir.mkdir()
        for name, content in tokenizer.files("spiece.model").items():
            (workdir / name).write_bytes(content)
        assert sorted(path.name for path in workdir.iterdir()) == ["spiece.model",
                                                                  "spiece.model.json"]
        assert json.loads((workdir / "spiece.model.json").read_text()) == {
            "kind": "sentencepiece", "do_lower_case": True, "keep_accents": False,
            "comma_rule": rule, "word_boundaries": "reference"}
        assert read_record(str(workdir / "spiece.model"))["comma_rule"] == rule
        loaded = Tokenizer.load(str(workdir / "spiece.model"))
        assert loaded.settings.comma_rule == rule
        assert loaded.pieces("x0, y") == tokenizer.pieces("x0, y")
        # An explicit rule (the run's config) wins over the recorded one.
        other = "hf" if rule == "reference" else "reference"
        explicit = Tokenizer.load(str(workdir / "spiece.model"), TextSettings(comma_rule=other))
        assert explicit.settings.comma_rule == other


def test_a_record_written_before_the_casing_was_recorded_keeps_the_run_config_casing(
        tmp_path, model_path):
    # Workdirs of earlier versions recorded only the digit-comma rule beside their model.
    (tmp_path / "spiece.model").write_bytes(open(model_path, "rb").read())
    (tmp_path / "spiece.model.json").write_text('{"comma_rule": "hf"}\n')
    recorded = TextSettings.recorded(str(tmp_path / "spiece.model"),
                                     TextSettings(do_lower_case=False))
    assert recorded == TextSettings(do_lower_case=False, comma_rule="hf")


def test_bad_rules_say_what_to_do(tmp_path, model_path):
    with pytest.raises(ConfigError, match=r"data.comma_rule='python2'.*'reference'.*'hf'"):
        Tokenizer.load(model_path, TextSettings(comma_rule="python2"))
    model = tmp_path / "spiece.model"
    model.write_bytes(open(model_path, "rb").read())
    (tmp_path / "spiece.model.json").write_text('{"comma_rule": "py2"}')
    with pytest.raises(ValueError, match=r"spiece.model.json records no tokenizer settings we can read"):
        Tokenizer.load(str(model))


def test_pretraining_workdir_records_the_rule(model_path):
    # The pretraining config's text settings travel with the workdir's spiece.model.
    config = pretrain_config.get_config("runlocal")
    config.data.tokenizer, config.data.comma_rule = model_path, "hf"
    config.data.do_lower_case, config.data.keep_accents = False, True
    config.data.word_boundaries = "spaces"
    task = pretraining.PretrainingTask(config, presets.get_config("tiny", vocab_size=220))
    files = task.workdir_files()
    assert files["spiece.model"] == open(model_path, "rb").read()
    assert json.loads(files["spiece.model.json"]) == {
        "kind": "sentencepiece", "do_lower_case": False, "keep_accents": True,
        "comma_rule": "hf", "word_boundaries": "spaces"}


@pytest.fixture(scope="module")
def checkpoints(model_path, tmp_path_factory, tokenizers) -> dict[str, str]:
    """init_from directories of a tiny model with the 220-piece tokenizer: a HuggingFace one
    and an Orbax checkpoint whose tokenizer records the "hf" rule."""
    root = tmp_path_factory.mktemp("checkpoints")
    model_config = presets.get_config("tiny", vocab_size=220)
    # Weights of the right shapes (their values do not matter here), without compiling an init.
    shapes = jax.eval_shape(lambda: AlbertForPreTraining(model_config).init(
        jax.random.PRNGKey(0), *pretraining.init_inputs(8, 2)))
    params = jax.tree.map(lambda leaf: np.full(leaf.shape, 0.01, leaf.dtype),
                          nn.unbox(shapes["params"]))
    save_huggingface(model_config, params, str(root / "hf"))
    (root / "hf" / "spiece.model").write_bytes(open(model_path, "rb").read())
    checkpoint.save_weights(str(root / "orbax"), model_config, params)
    for name, content in tokenizers["hf"].files("spiece.model").items():
        (root / "orbax" / name).write_bytes(content)
    return {"huggingface": str(root / "hf"), "orbax": str(root / "orbax")}


@pytest.mark.parametrize("kind", ["huggingface", "orbax"])
def test_finetuning_takes_the_checkpoint_rule_unless_the_config_sets_one(
        kind, checkpoints, tmp_path, caplog):
    config = glue_config.get_config("task=rte,runlocal")
    config.data.path = write_glue_task(str(tmp_path), "rte")
    config.init_from = checkpoints[kind]
    assert config.data.comma_rule is None  # unset: the checkpoint's
    with caplog.at_level(logging.WARNING):
        task = finetune_run.build_task(config)
    assert task.pretrained.kind == kind and task.pretrained.text["comma_rule"] == "hf"
    assert not [record for record in caplog.records if "comma_rule" in record.getMessage()]
    assert task.tokenizer.settings.comma_rule == "hf" and config.data.comma_rule == "hf"
    assert task.tokenizer.pieces("x0, y") == ["▁", "x", "0", ",", "▁", "y"]
    # The fine-tuning workdir records the rule: evaluate's Tokenizer.load reads it back.
    assert json.loads(task.workdir_files()["spiece.model.json"])["comma_rule"] == "hf"

    caplog.clear()
    config.data.comma_rule = "reference"  # set by the run: it wins, with one warning line
    with caplog.at_level(logging.WARNING):
        task = finetune_run.build_task(config)
    warnings = [record.getMessage() for record in caplog.records if "comma_rule" in
                record.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert (f"data.comma_rule='reference' differs from the init_from {kind} checkpoint ('hf')"
            in warnings[0]) and "--config.data.comma_rule=hf" in warnings[0]
    assert task.tokenizer.settings.comma_rule == "reference"
    assert task.tokenizer.pieces("x0, y") == ["▁", "x", "▁", "0", ",", "▁", "y"]
    assert json.loads(task.workdir_files()["spiece.model.json"])["comma_rule"] == "reference"


def test_data_build_uses_the_rule(model_path, tmp_path):
    # The rule changes the tokens, so it is part of the dataset's identity (its folder).
    config = pretrain_config.get_config("runlocal")
    config.data.tokenizer, config.data.vocab_size = model_path, 220
    config.data.dir = str(tmp_path / "data")
    names = set()
    for rule in ("reference", "hf"):
        config.data.comma_rule = rule
        data_builder = builder.make_builder(config)
        assert data_builder.builder_config.text.comma_rule == rule
        assert data_builder.tokenizer.settings.comma_rule == rule
        names.add(data_builder.builder_config.name)
    assert len(names) == 2
    config.data.comma_rule = "python2"
    with pytest.raises(ConfigError, match=r"data.comma_rule='python2' \(one of"):
        builder.make_builder(config)
