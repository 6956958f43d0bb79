"""Builds of text in many scripts (tests/multilingual_text.py): keep_accents keeps the marks in
the examples, word_boundaries "spaces" masks whole words of Hindi and Russian (also when the
input pipeline masks anew), and `data build` / `data inspect` warn where the reference settings
damage the text. The English build at the defaults keeps its bytes: test_block_examples."""
import re
import unicodedata

import numpy as np
import pytest

from albert_jax.data import inspection
from albert_jax.data.building import builder, dataset_settings, masking
from albert_jax.data.input import pipeline
from albert_jax.data.tokenizers import TextSettings, Tokenizer, train
from tests.multilingual_text import MARKS, sentences, write_corpus
from tests.test_builder import small_config

pytestmark = pytest.mark.slow

SCRIPTS = ("hi", "th", "ja", "ru")
MULTILINGUAL = dict(do_lower_case=False, keep_accents=True, word_boundaries="spaces")
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")
_NO_SPACE_NAMES = ("THAI", "HIRAGANA", "KATAKANA", "CJK")


def _build(tmp, name, languages, *, train_options, **data):
    """The config of a build of `languages` with `data`'s keys and a tokenizer trained with
    them."""
    folder = tmp / name
    folder.mkdir()
    corpus_file = write_corpus(folder / "corpus.txt", *languages, repeat=4)
    settings = TextSettings(**{key: data[key] for key in MULTILINGUAL if key in data})
    model = train(sentences(*languages), str(folder / "spm.model"), settings=settings,
                  **train_options)
    return small_config(folder, str(corpus_file), model, vocab_size=train_options["vocab_size"],
                        dupe_factor=3, eval_fraction=0.0, **data)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """name -> (config, what `data build` printed)."""
    tmp = tmp_path_factory.mktemp("multilingual_builds")
    capture = pytest.MonkeyPatch()
    made = {}
    for name, languages, train_options, data in [
            ("multilingual", SCRIPTS, dict(vocab_size=600, character_coverage=0.99,
                                           byte_fallback=True), MULTILINGUAL),
            ("default", SCRIPTS, dict(vocab_size=340), {}),
            ("english", ("en",), dict(vocab_size=100), {})]:
        config = _build(tmp, name, languages, train_options=train_options, **data)
        lines: list[str] = []
        capture.setattr("builtins.print", lambda *args, **_: lines.append(" ".join(map(str, args))))
        builder.build_from_config(config, num_processes=1)
        capture.undo()
        made[name] = (config, "\n".join(lines))
    return made


def _examples(config):
    source = pipeline.SplitSource(dataset_settings.dataset_dir(config), "train")
    return source.metadata, [source[index] for index in range(len(source))]


def _decoded(config) -> str:
    tokenizer = Tokenizer.load(config.data.tokenizer, TextSettings.from_config(config.data))
    _, examples = _examples(config)
    return " ".join(tokenizer.decode(masking.unmask_features(features)) for features in examples)


def test_keep_accents_keeps_the_marks_and_the_default_drops_them(builds):
    kept = unicodedata.normalize("NFD", _decoded(builds["multilingual"][0]))
    dropped = unicodedata.normalize("NFD", _decoded(builds["default"][0]))
    for language in SCRIPTS:
        assert MARKS[language] in kept, language
        assert MARKS[language] not in dropped, language


def _starts_word(piece: str) -> bool:
    """Written independently of the code: a space before the piece, punctuation, a special
    piece, or a script without spaces (by the Unicode name of its first character)."""
    if piece in ("[CLS]", "[SEP]") or _BYTE_PIECE.fullmatch(piece):
        return piece in ("[CLS]", "[SEP]")
    first = piece[0]
    return (first == "▁" or unicodedata.category(first).startswith("P")
            or unicodedata.name(first, "").startswith(_NO_SPACE_NAMES))


def _runs_inside_words(config, examples) -> tuple[int, int]:
    """(masked runs, runs that begin or end inside a word) over `examples`."""
    tokenizer = Tokenizer.load(config.data.tokenizer, TextSettings.from_config(config.data))
    runs = broken = 0
    for features in examples:
        tokens = masking.unmask_features(features)
        pieces = tokenizer.id_to_piece(tokens)
        # A truncated segment (SPEC 1.3.7) may begin inside a word: its text begins there.
        starts = [_starts_word(piece) or pieces[index - 1] in ("[CLS]", "[SEP]")
                  for index, piece in enumerate(pieces)] + [True]
        real = features["masked_lm_weights"] > 0
        masked = np.zeros(len(tokens) + 1, bool)
        masked[features["masked_lm_positions"][real]] = True
        edges = np.flatnonzero(np.diff(np.concatenate([[False], masked]).astype(np.int8)))
        for begin, end in zip(edges[::2], edges[1::2]):
            runs += 1
            broken += not (starts[begin] and starts[end])
    return runs, broken


def test_spaces_masks_whole_words(builds):
    config, _ = builds["multilingual"]
    metadata, examples = _examples(config)
    assert metadata["settings"]["word_boundaries"] == "spaces"
    assert metadata["settings"]["keep_accents"] is True
    runs, broken = _runs_inside_words(config, examples)
    assert runs > 200 and broken == 0
    # Dynamic masking (the input pipeline) masks with the build's word starts too.
    masker = pipeline.DynamicMasking.from_metadata(config, metadata)
    remasked = [masker(1, (index, features)) for index, features in enumerate(examples)]
    assert any((new["masked_lm_positions"] != old["masked_lm_positions"]).any()
               for new, old in zip(remasked, examples))
    runs, broken = _runs_inside_words(config, remasked)
    assert runs > 200 and broken == 0
    # The reference's word starts cut Hindi and Russian words: many runs start or end inside.
    runs, broken = _runs_inside_words(builds["default"][0], _examples(builds["default"][0])[1])
    assert broken > 0.2 * runs


def test_build_and_inspect_warn_where_the_defaults_damage_the_text(builds, capsys):
    warned = builds["default"][1]
    assert "--config.data.keep_accents=True" in warned
    assert "--config.data.word_boundaries=spaces" in warned
    assert "warning" not in builds["multilingual"][1]
    assert "warning" not in builds["english"][1]
    inspection.inspect_from_config(builds["default"][0], 1)
    assert "--config.data.keep_accents=True" in capsys.readouterr().out
    inspection.inspect_from_config(builds["english"][0], 1)
    assert "warning" not in capsys.readouterr().out
