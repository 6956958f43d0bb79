"""A user's own data: CSV/TSV/JSONL/Parquet readers, column mapping, label lists,
multiple choice with any number of options, configs/custom.py, and a one-line error for every
fault a user can make."""
import json
import random

import jax
import numpy as np
import pytest

import test_finetune_features
from albert_jax.errors import ConfigError
from albert_jax.finetune.core import features, tables
from albert_jax.finetune.core.examples import ChoiceQuestion as Question
from albert_jax.finetune.core.examples import TextExample as Example
from albert_jax.finetune.core.tables import Columns
from albert_jax.finetune.custom import data as custom_data
from albert_jax.model import AlbertForMultipleChoice, get_config
from configs import custom as custom_config
from finetune_fixtures import sentence

# The tiny SentencePiece fixture, bound by assignment (the tests' argument does not redefine it).
tokenizer = test_finetune_features.tokenizer

# Three labels with spaces and non-ASCII; Python's string order is n < o < t.
LABELS = ("not good", "okay ☺", "très bien")


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _columns(kind: str, **overrides) -> Columns:
    data = custom_config.get_config(f"kind={kind}").data
    for key, value in overrides.items():
        data[key] = value
    return custom_data.columns(data, kind)


def _jsonl(rows) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


# A CSV whose fields hold quoted commas, doubled quotes and a newline; the physical line where
# each row starts, counted by hand: header 1, r0 2, r1 3-4, r2 5, a blank line 6, r3 7.
CSV_TEXT = ('id,text,label\n'
            'r0,"Hello, world",très bien\n'
            'r1,"first line\nsecond line, with a comma",not good\n'
            'r2,"She said ""hi""",okay ☺\n'
            '\n'
            'r3,plain text,très bien\n')


def test_csv_quoting_and_physical_line_numbers(tmp_path):
    path = _write(tmp_path, "train.csv", CSV_TEXT)
    examples = tables.read_file(path, "classification", _columns("classification",
                                                                 id="id"))
    assert examples == [
        Example("r0", "Hello, world", None, "très bien", f"{path}:2"),
        Example("r1", "first line\nsecond line, with a comma", None, "not good", f"{path}:3"),
        Example("r2", 'She said "hi"', None, "okay ☺", f"{path}:5"),
        Example("r3", "plain text", None, "très bien", f"{path}:7")]
    # A bad row right after the two-line row is reported at the line it starts on.
    bad = _write(tmp_path, "bad.csv", 'text,label\n"a\nb",x\nonly one field\n')
    with pytest.raises(ValueError, match=r"bad\.csv:4: 1 fields, but the header has 2 "
                                         r"\(text, label\); first field 'only one field'"):
        tables.read_file(bad, "classification", _columns("classification"))


def test_label_list_sorted_or_given_and_checked_on_dev(tmp_path):
    columns = _columns("classification", id="id")
    train_examples = tables.read_file(_write(tmp_path, "train.csv", CSV_TEXT),
                                      "classification", columns)
    assert custom_data.label_list(train_examples) == LABELS
    # data.labels sets the class order, as a comma list or a JSON list (labels with commas).
    assert custom_data.label_list(train_examples, "très bien, okay ☺,not good") == (
        "très bien", "okay ☺", "not good")
    assert custom_data.label_list(train_examples, '["okay ☺", "très bien", "not good", "a, b"]'
                                  ) == ("okay ☺", "très bien", "not good", "a, b")
    with pytest.raises(ValueError, match=r"train\.csv:3: label 'not good' is not in config "
                                         r"data\.labels \('très bien', 'okay ☺'\)"):
        custom_data.label_list(train_examples, "très bien,okay ☺")
    with pytest.raises(ConfigError, match=r"data\.labels names 'a' more than once"):
        custom_data.label_list(train_examples, "a,b,a")
    one_label = [Example("0", "x", None, "yes", "t.csv:2")]
    with pytest.raises(ValueError, match=r"training file t\.csv has 1 label\(s\) \('yes'\).*at "
                                         r"least 2"):
        custom_data.label_list(one_label)
    dev = _write(tmp_path, "dev.csv", "id,text,label\nd0,fine,okay ☺\nd1,meh,très mal\n")
    with pytest.raises(ValueError, match=r"dev\.csv:3: label 'très mal' is not one of the 3 "
                                         r"labels \('not good', 'okay ☺', 'très bien'\)"):
        tables.read_file(dev, "classification", columns, label_list=LABELS)


def test_labels_json_round_trip(tmp_path):
    text = custom_data.labels_json(LABELS)
    assert "très bien" in text  # Written as UTF-8, not \u escapes.
    assert custom_data.labels_from_json(text, "labels.json") == LABELS
    for bad in ("[1, 2]", '["a"]', '["a", "a"]', "{", '{"labels": ["a", "b"]}'):
        with pytest.raises(ValueError, match="labels.json: "):
            custom_data.labels_from_json(bad, "labels.json")


def test_json_and_parquet_values_become_label_strings(tmp_path):
    rows = [{"text": "one", "label": 1}, {"text": "yes", "label": True},
            {"text": "one again", "label": "1"}, {"text": "half", "label": 0.5}]
    path = _write(tmp_path, "train.jsonl", _jsonl(rows))
    examples = tables.read_file(path, "classification", _columns("classification"))
    assert [example.label for example in examples] == ["1", "true", "1", "0.5"]
    assert [example.id for example in examples] == ["0", "1", "2", "3"]  # row numbers


def test_tsv_has_no_quoting(tmp_path):
    path = _write(tmp_path, "dev.tsv", 'sentence\tother\tlabel\nHe said "no\tx\tpos\n'
                                       '"quoted, text"\ty\tneg\n')
    examples = tables.read_file(path, "classification",
                                _columns("classification", text_a="sentence", text_b="other"))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ('He said "no', "x", "pos"), ('"quoted, text"', "y", "neg")]


def test_regression_jsonl(tmp_path, tokenizer):
    rows = [{"text": "a man walked", "score": 1.5}, {"text": "the dog", "score": "2"},
            {"text": "a cat", "score": -3}]
    path = _write(tmp_path, "train.jsonl", _jsonl(rows))
    examples = tables.read_file(path, "regression", _columns("regression", label="score"))
    assert [example.label for example in examples] == ["1.5", "2", "-3"]
    arrays = features.classification_features(examples, tokenizer, 16, None)
    np.testing.assert_array_equal(arrays["labels"], np.float32([1.5, 2, -3]))


def _multiple_choice_rows():
    return [{"context": "The man walked near the market.", "question": "He walked near the _",
             "options": ["market", "river", "house"], "label": 0},
            {"context": "A dog saw a bird.", "question": "What did the dog see?",
             "options": ["a cat", "a bird", "a car"], "label": "a bird"},
            {"context": "The train was late.", "question": "What was late?",
             "options": ["the bus", "the car", "the train"], "label": "2"}]


def test_multiple_choice_options_as_a_list_or_as_columns(tmp_path):
    rows = _multiple_choice_rows()
    listed = _write(tmp_path, "train.jsonl", _jsonl(rows))
    questions = tables.read_file(listed, "multiple_choice", _columns("multiple_choice"))
    assert questions[1] == Question("1", "A dog saw a bird.", "What did the dog see?",
                                    ("a cat", "a bird", "a car"), 1, f"{listed}:2")
    assert [question.answer for question in questions] == [0, 1, 2]
    # The same questions as a CSV with one column per option.
    lines = ["context,question,a,b,c,label"] + [
        ",".join([f'"{row["context"]}"', f'"{row["question"]}"', *row["options"],
                  str(row["label"])]) for row in rows]
    columns = _write(tmp_path, "train.csv", "\n".join(lines) + "\n")
    from_columns = tables.read_file(columns, "multiple_choice",
                                    _columns("multiple_choice", options="a,b,c"))
    assert [(q.article, q.question, q.options, q.answer) for q in from_columns] == [
        (q.article, q.question, q.options, q.answer) for q in questions]
    # In CSV a single options column holds a JSON list.
    as_json = _write(tmp_path, "json_options.csv",
                     'question,options,label\nWhich?,"[""x"", ""y""]",y\n')
    [question] = tables.read_file(as_json, "multiple_choice",
                                  _columns("multiple_choice", context=""))
    assert (question.article, question.options, question.answer) == ("", ("x", "y"), 1)


def test_multiple_choice_features_with_any_number_of_options(tokenizer):
    rng = random.Random(3)
    for num_choices in (2, 3, 5):
        questions = [Question(str(n), sentence(rng, 6, 20), "the man walked over the _",
                              tuple(sentence(rng, 1, 3, end="") for _ in range(num_choices)),
                              answer, f"f.jsonl:{n + 1}")
                     for n, answer in enumerate([num_choices - 1, None, 0])]
        batch = features.multiple_choice_features(questions, tokenizer, 24, max_qa_length=8,
                                                  num_choices=num_choices)
        assert batch["input_ids"].shape == (3, num_choices, 24)
        assert batch["labels"].tolist() == [num_choices - 1, 0, 0]
        for row, question in enumerate(questions):
            single = features.encode_multiple_choice(
                tokenizer, question.article, question.question, question.options, 24,
                max_qa_length=8, num_choices=num_choices)
            for name, array in zip(("input_ids", "segment_ids", "input_mask"), single):
                np.testing.assert_array_equal(batch[name][row], array)
    with pytest.raises(ValueError, match="needs 3 options, got 2"):
        features.multiple_choice_features(
            [Question("0", "a", "b", ("c", "d", "e"), 0, "f:1"),
             Question("1", "a", "b", ("c", "d"), 0, "f:2")], tokenizer, 24, num_choices=3)


def test_multiple_choice_model_takes_any_number_of_choices():
    """The same params score 5 or 3 choices: each choice is one row through the encoder."""
    model = AlbertForMultipleChoice(get_config("tiny", vocab_size=64, num_hidden_layers=1))
    rng = np.random.default_rng(0)
    input_ids = rng.integers(5, 64, (2, 5, 8)).astype(np.int32)
    segment_ids, input_mask = np.zeros_like(input_ids), np.ones_like(input_ids)
    logits_5, params = jax.jit(model.init_with_output)(jax.random.key(0), input_ids,
                                                       segment_ids, input_mask)
    logits_3 = jax.jit(model.apply)(params, input_ids[:, :3], segment_ids[:, :3],
                                    input_mask[:, :3])
    assert logits_5.shape == (2, 5) and logits_3.shape == (2, 3)
    np.testing.assert_allclose(logits_5[:, :3], logits_3, atol=1e-6)
    assert not np.allclose(logits_5[:, 0], logits_5[:, 1])  # The choices differ.


def test_chunks_are_streamed_with_row_numbers_across_chunks(tmp_path):
    rows = [{"text": f"sentence {n}", "label": "a" if n % 2 else "b"} for n in range(7)]
    # A broken last line: the first chunks arrive before it is read (the file is not read whole).
    path = _write(tmp_path, "big.jsonl", _jsonl(rows) + "{broken\n")
    chunks = tables.iter_example_chunks(path, "classification", _columns("classification"),
                                        chunk_rows=3)
    first, second = next(chunks), next(chunks)
    assert [len(first), len(second)] == [3, 3]
    assert [example.id for example in first + second] == [str(n) for n in range(6)]
    assert second[2].source == f"{path}:6"
    with pytest.raises(ValueError, match=r"big\.jsonl:8: not valid JSON"):
        next(chunks)
    assert [len(chunk) for chunk in tables.iter_row_chunks(
   _write(tmp_path, "seven.jsonl", _jsonl(rows)), 3)] == [3, 3, 1]


def test_parquet_reads_as_jsonl_does(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet
    rows = [{"text": "Hello, world", "pair": "ça va", "label": "très bien"},
            {"text": "second", "pair": "row", "label": "not good"},
            {"text": "third", "pair": "one", "label": "okay ☺"}]
    path = str(tmp_path / "train.parquet")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path, row_group_size=2)
    columns = _columns("classification", text_b="pair")
    from_parquet = tables.read_file(path, "classification", columns)
    from_jsonl = tables.read_file(_write(tmp_path, "train.jsonl", _jsonl(rows)),
                                  "classification", columns)
    assert [example.source for example in from_parquet] == [f"{path}:{n}" for n in (1, 2, 3)]
    def strip(examples):
        return [(e.id, e.text_a, e.text_b, e.label) for e in examples]

    assert strip(from_parquet) == strip(from_jsonl)
    with pytest.raises(ValueError, match=r"not_parquet\.parquet: not a Parquet file"):
        tables.read_file(_write(tmp_path, "not_parquet.parquet", "text\nx\n"),
                         "classification", columns)


def test_files_to_predict_need_no_label(tmp_path):
    path = _write(tmp_path, "test.csv", "text\nfirst\nsecond\n")
    examples = tables.read_file(path, "classification", _columns("classification"),
                                label_list=LABELS, labelled=False)
    assert [(example.text_a, example.label) for example in examples] == [
        ("first", None), ("second", None)]
    # An empty label cell is no label; a label that is there is still checked.
    path = _write(tmp_path, "test2.csv", "text,label\nfirst,\nsecond,bad\n")
    with pytest.raises(ValueError, match=r"test2\.csv:3: label 'bad' is not one of the 3"):
        tables.read_file(path, "classification", _columns("classification"),
                         label_list=LABELS, labelled=False)
    questions = tables.read_file(
   _write(tmp_path, "test.jsonl", _jsonl([{"question": "q?", "options": ["a", "b"]}])),
   "multiple_choice", _columns("multiple_choice", context=""), labelled=False)
    assert questions[0].answer is None


def test_read_split_uses_the_config(tmp_path):
    config = custom_config.get_config("kind=classification,runlocal")
    config.data.train_file = _write(tmp_path, "train.csv", CSV_TEXT)
    train_examples = custom_data.read_split(config.data, "classification", "train")
    assert len(train_examples) == 4
    with pytest.raises(ConfigError, match=r"config data\.dev_file is empty: give the dev file"):
        custom_data.read_split(config.data, "classification", "dev")
    config.data.dev_file = str(tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError, match=r"data\.dev_file=.*missing\.csv: no such file"):
        custom_data.read_split(config.data, "classification", "dev")
    config.data.test_file = _write(tmp_path, "test.csv", "text\nnew text\n")
    [example] = custom_data.read_split(config.data, "classification", "test", label_list=LABELS)
    assert example.label is None


def test_config_per_kind():
    for kind, metric in (("classification", "accuracy"), ("regression", "pearson"),
                         ("multiple_choice", "accuracy")):
        config = custom_config.get_config(f"kind={kind}")
        assert (config.task, config.selection_metric) == (kind, metric)
        assert config.data.label == "label" and config.data.id == ""
        assert "path" not in config.data and "tfds_name" not in config.data
        assert custom_data.columns(config.data, kind)  # Every key the reader needs is there.
    config = custom_config.get_config("kind=classification")
    assert (config.data.text_a, config.data.text_b, config.data.labels) == ("text", "", "")
    assert (config.optim.lr, config.batch_size, config.seq_len) == (2e-5, 32, 512)
    config = custom_config.get_config("kind=multiple_choice,runlocal")
    assert (config.data.context, config.data.question, config.data.options) == (
        "context", "question", "options")
    assert (config.model, config.max_qa_length) == ("tiny", 24)
    with pytest.raises(AttributeError):  # Locked: a key of another kind is refused.
        config.data.text_a = "text"
    with pytest.raises(ConfigError, match="needs kind=<kind>, one of classification, "
                                          "regression, multiple_choice"):
        custom_config.get_config("kind=ner")
    assert _columns("multiple_choice", options='["option, one", "b"]').options == (
        "option, one", "b")
    with pytest.raises(ConfigError, match=r"config data has no context, question, options: a "
                                          r"multiple_choice task needs the data section of "
                                          r"configs/custom\.py:kind=multiple_choice"):
        custom_data.columns(custom_config.get_config("kind=regression").data, "multiple_choice")
    with pytest.raises(ConfigError, match=r"data\.text_a is empty"):
        _columns("classification", text_a="")
    with pytest.raises(ConfigError, match=r"data\.options is empty"):
        _columns("multiple_choice", options=" ")


MULTIPLE_CHOICE = _jsonl(_multiple_choice_rows())


@pytest.mark.parametrize("name, text, kind, overrides, keywords, message", [
    # A missing column: named with its config key and the file's columns.
    ("a.csv", "sentence,label\nhello,x\n", "classification", {}, {},
     r"a\.csv:2: no column 'text' \(config data\.text_a\); the file's columns are "
     r"'sentence', 'label'"),
    ("a.jsonl", '{"text": "x", "label": "a"}\n{"text": "y"}\n', "classification", {}, {},
     r"a\.jsonl:2: no column 'label' \(config data\.label\); the file's columns are 'text'"),
    ("a.csv", "text,label\nx,a\n", "classification", {"text_b": "second"}, {},
     r"a\.csv:2: no column 'second' \(config data\.text_b\)"),
    # Empty texts and labels.
    ("a.csv", "text,label\nx,a\n  ,b\n", "classification", {}, {},
     r"a\.csv:3: column 'text' \(config data\.text_a\) is empty: '  '"),
    ("a.jsonl", '{"text": null, "label": "a"}\n', "classification", {}, {},
     r"a\.jsonl:1: column 'text' \(config data\.text_a\) is empty: None"),
    ("a.csv", "text,label\nx,\n", "classification", {}, {},
     r"a\.csv:2: column 'label' \(config data\.label\) is empty; every example of a training"),
    ("a.jsonl", '{"text": ["x"], "label": "a"}\n', "classification", {}, {},
     r"a\.jsonl:1: column 'text' holds a list, not a text"),
    # Labels.
    ("a.csv", "text,label\nx,a\ny,c\n", "classification", {}, {"label_list": ("a", "b")},
     r"a\.csv:3: label 'c' is not one of the 2 labels \('a', 'b'\)"),
    ("a.csv", "text,label\nx,1.5\ny,high\n", "regression", {}, {},
     r"a\.csv:3: regression label 'high' is not a finite number"),
    ("a.jsonl", '{"text": "x", "label": Infinity}\n', "regression", {}, {},
     r"a\.jsonl:1: regression label inf is not a finite number"),
    ("a.jsonl", '{"text": "x", "label": NaN}\n', "regression", {}, {},  # pandas' missing value
     r"a\.jsonl:1: column 'label' \(config data\.label\) is empty"),
    ("a.jsonl", '{"text": "x", "label": true}\n', "regression", {}, {},
     r"a\.jsonl:1: regression label True is not a finite number"),
    # Malformed files.
    ("a.jsonl", '{"text": "x", "label": "a"}\n{"text": "y", label: "b"}\n', "classification",
     {}, {}, r"a\.jsonl:2: not valid JSON \(Expecting property name enclosed in double quotes "
             r"at column 15\)"),
    ("a.jsonl", '["x", "a"]\n', "classification", {}, {},
     r"a\.jsonl:1: a JSON list, not an object"),
    ("a.csv", "text,label\nx,a\ny,b,extra\n", "classification", {}, {},
     r"a\.csv:3: 3 fields, but the header has 2 \(text, label\); first field 'y'; quote a "
     r"field that holds a comma"),
    ("a.tsv", "text\tlabel\nx\ty\tz\n", "classification", {}, {},
     r"a\.tsv:2: 3 fields, but the header has 2 .* a tab inside a text breaks a TSV row"),
    ("a.csv", "text,text\nx,a\n", "classification", {}, {},
     r"a\.csv:1: the header names column\(s\) 'text' more than once"),
    ("a.csv", "", "classification", {}, {}, r"a\.csv: empty file; expected a header row"),
    ("a.csv", "text,label\n", "classification", {}, {}, r"a\.csv: no examples"),
    ("a.json", "[]", "classification", {}, {},
     r"a\.json: unknown file type '\.json'; use \.csv, \.tsv, \.jsonl, \.parquet"),
    ("a.csv", "text,label\nx,a\n", "classification", {"id": "key"}, {},
     r"a\.csv:2: no column 'key' \(config data\.id\)"),
    # Multiple choice.
    ("a.jsonl", MULTIPLE_CHOICE + '{"context": "c", "question": "q", "options": ["a", "b"], '
                                  '"label": 0}\n', "multiple_choice", {}, {},
     r"a\.jsonl:4: 2 options, but .*a\.jsonl:1 \(the first row\) has 3; every question needs "
     r"the same number of options"),
    ("a.jsonl", MULTIPLE_CHOICE, "multiple_choice", {}, {"num_choices": 4},
     r"a\.jsonl:1: 3 options, but the training data has 4"),
    ("a.jsonl", '{"context": "c", "question": "q", "options": ["a", "b"], "label": 2}\n',
     "multiple_choice", {}, {}, r"a\.jsonl:1: answer index 2 is out of range: the 2 options "
                                r"are numbered 0\.\.1"),
    ("a.jsonl", '{"context": "c", "question": "q", "options": ["a", "b"], "label": "c"}\n',
     "multiple_choice", {}, {}, r"a\.jsonl:1: answer 'c' is neither an option index nor the "
                                r"text of an option"),
    ("a.jsonl", '{"context": "c", "question": "q", "options": "a or b", "label": 0}\n',
     "multiple_choice", {}, {}, r"a\.jsonl:1: column 'options' \(config data\.options\) is not "
                                r"a list of options: 'a or b'"),
    ("a.jsonl", '{"context": "c", "question": "q", "options": ["a", ""], "label": 0}\n',
     "multiple_choice", {}, {}, r"a\.jsonl:1: option 1 of column 'options' is empty"),
    ("a.jsonl", '{"context": "c", "question": "q", "options": ["a"], "label": 0}\n',
     "multiple_choice", {}, {}, r"a\.jsonl:1: 1 option\(s\); a multiple-choice question needs "
                                r"at least 2"),
])
def test_every_bad_input_is_one_line_naming_file_line_and_value(
        tmp_path, name, text, kind, overrides, keywords, message):
    path = _write(tmp_path, name, text)
    with pytest.raises(ValueError, match=message) as error:
        tables.read_file(path, kind, _columns(kind, **overrides), **keywords)
    assert "\n" not in str(error.value)
    assert path in str(error.value)


def test_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.csv: no such file"):
        tables.read_file(str(tmp_path / "nope.csv"), "classification",
                         _columns("classification"))
    path = tmp_path / "latin1.csv"
    path.write_bytes("text,label\ncaf\xe9,a\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.csv: not UTF-8 text"):
        tables.read_file(str(path), "classification", _columns("classification"))

