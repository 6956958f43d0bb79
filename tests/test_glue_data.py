"""GLUE readers (official TSV files and TFDS), label lists and prediction files (SPEC 8.2)."""
import csv
import os
import re

import numpy as np
import pytest
import tensorflow_datasets as tfds

from albert_jax.finetune.core.examples import TextExample
from albert_jax.finetune.glue import data as glue
from finetune_fixtures import GLUE_FOLDERS, write_glue_task

# What the files hold, by header name (independent of the reader's column positions).
TEXT_COLUMNS = {"cola": ("sentence", None), "sst2": ("sentence", None),
                "mrpc": ("#1 String", "#2 String"), "stsb": ("sentence1", "sentence2"),
                "qqp": ("question1", "question2"), "mnli": ("sentence1", "sentence2"),
                "qnli": ("question", "sentence"), "rte": ("sentence1", "sentence2"),
                "wnli": ("sentence1", "sentence2")}
LABEL_COLUMNS = {"sst2": "label", "mrpc": "Quality", "stsb": "score", "qqp": "is_duplicate",
                 "mnli": "gold_label", "qnli": "label", "rte": "label", "wnli": "label"}
SUBMISSION_FILES = {"cola": "CoLA.tsv", "sst2": "SST-2.tsv", "mrpc": "MRPC.tsv",
                    "stsb": "STS-B.tsv", "qqp": "QQP.tsv", "mnli": "MNLI-m.tsv",
                    "qnli": "QNLI.tsv", "rte": "RTE.tsv", "wnli": "WNLI.tsv"}


def _file_rows(path: str, task: str, labelled: bool) -> list[tuple]:
    """(index, text_a, text_b, label, line number) of each data line, by splitting on tabs."""
    lines = open(path, encoding="utf-8", newline="").read().split("\n")
    assert lines[-1] == ""  # Every line ends in "\n".
    lines = lines[:-1]
    if task == "cola" and labelled:  # No header: source, label, original label, sentence.
        return [(str(number), line.split("\t")[3], None, line.split("\t")[1], number + 1)
                for number, line in enumerate(lines)]
    header = lines[0].split("\t")
    rows = []
    for number, line in enumerate(lines[1:]):
        fields = dict(zip(header, line.split("\t")))
        text_a, text_b = TEXT_COLUMNS[task]
        index = fields.get("id", fields.get("index", str(number)))
        rows.append((index, fields[text_a], fields[text_b] if text_b else None,
                     fields[LABEL_COLUMNS[task]] if labelled else None, number + 2))
    return rows


def _as_rows(examples: list[TextExample], path: str) -> list[tuple]:
    rows = []
    for example in examples:
        file_name, line = example.source.rsplit(":", 1)
        assert file_name == path
        rows.append((example.id, example.text_a, example.text_b, example.label, int(line)))
    return rows


@pytest.mark.parametrize("task", glue.TASKS)
def test_every_task_reads_its_files(tmp_path, task):
    data_path = write_glue_task(tmp_path, task, num_train=7, num_dev=5, num_test=6, seed=3)
    assert os.path.basename(data_path) == GLUE_FOLDERS[task]
    train, skipped = glue.read_train(task, data_path)
    assert skipped == glue.SkipReport(os.path.join(data_path, "train.tsv"), ())
    assert _as_rows(train, os.path.join(data_path, "train.tsv")) == _file_rows(
        os.path.join(data_path, "train.tsv"), task, labelled=True)
    assert len(train) == 7
    for example in train:
        if task == "stsb":
            assert 0.0 <= float(example.label) <= 5.0
        else:
            assert example.label in glue.labels(task)
        assert (example.text_b is None) == (task in ("cola", "sst2"))

    dev_files = {"mnli": [("dev", "dev_matched.tsv", "MNLI-m.tsv"),
                          ("dev_mismatched", "dev_mismatched.tsv", "MNLI-mm.tsv")]}.get(
        task, [("dev", "dev.tsv", SUBMISSION_FILES[task])])
    test_files = {"mnli": [("test", "test_matched.tsv", "MNLI-m.tsv"),
                           ("test_mismatched", "test_mismatched.tsv", "MNLI-mm.tsv"),
                           ("ax", "../diagnostic/diagnostic.tsv", "AX.tsv")]}.get(
        task, [("test", "test.tsv", SUBMISSION_FILES[task])])
    for split, files, labelled in (("dev", dev_files, True), ("test", test_files, False)):
        eval_sets = glue.read_eval_sets(task, data_path, split)
        assert [(eval_set.name, eval_set.submission_file) for eval_set in eval_sets] == [
            (name, submission) for name, _, submission in files]
        for eval_set, (_, file_name, _) in zip(eval_sets, files):
            path = os.path.normpath(os.path.join(data_path, file_name))
            expected = _file_rows(path, "mnli" if file_name.startswith("..") else task,
                                  labelled)
            assert _as_rows(eval_set.examples, path) == expected
            assert eval_set.skipped == glue.SkipReport(path, ())
            if not labelled:
                assert [example.id for example in eval_set.examples] == [
                    str(number) for number in range(len(expected))]
                assert all(example.label is None for example in eval_set.examples)


def test_hand_written_mnli_dev(tmp_path):
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\t"
              "label4\tlabel5\tgold_label\n")
    (tmp_path / "dev_matched.tsv").write_text(
        header +
        "0\t63735\t63735n\tslate\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tThe new rights are nice "
        "enough\tEveryone really likes the newest benefits \tneutral\tentailment\tneutral\t"
        "neutral\tneutral\tneutral\n"
        "1\t91383\t91383c\tgovernment\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tThis site includes a "
        "list of \"all award winners\tThe Government Executive articles housed on the website "
        "are not able to be searched .\tcontradiction\tcontradiction\tcontradiction\t"
        "contradiction\tcontradiction\tcontradiction\n", encoding="utf-8")
    (tmp_path / "dev_mismatched.tsv").write_text(
        header + "7\t1\t1e\tletters\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tYour gift is "
        "appreciated.\tHundreds of students will benefit.\tentailment\tentailment\tentailment\t"
        "entailment\tentailment\tentailment\n", encoding="utf-8")
    matched, mismatched = glue.read_eval_sets("mnli", str(tmp_path), "dev")
    path = str(tmp_path / "dev_matched.tsv")
    assert matched.examples == [
        TextExample("0", "The new rights are nice enough",
                    "Everyone really likes the newest benefits ", "neutral", f"{path}:2"),
        TextExample("1", 'This site includes a list of "all award winners',
                    "The Government Executive articles housed on the website are not able to "
                    "be searched .", "contradiction", f"{path}:3")]
    assert mismatched.examples == [TextExample(
        "7", "Your gift is appreciated.", "Hundreds of students will benefit.", "entailment",
        f"{tmp_path / 'dev_mismatched.tsv'}:2")]


def test_cola_train_has_no_header_and_test_has_one(tmp_path):
    (tmp_path / "train.tsv").write_text(
        "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
        "gj04\t0\t*\tThe more we study verbs, the crazier they get\"\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_text(
        "index\tsentence\n0\tBill whistled past the house.\n1\t\"Quote.\n", encoding="utf-8")
    train, _ = glue.read_train("cola", str(tmp_path))
    assert [(example.id, example.text_a, example.text_b, example.label)
            for example in train] == [
        ("0", "Our friends won't buy this analysis, let alone the next one we propose.", None,
         "1"),
        ("1", 'The more we study verbs, the crazier they get"', None, "0")]
    (test,) = glue.read_eval_sets("cola", str(tmp_path), "test")
    assert [(example.id, example.text_a, example.label) for example in test.examples] == [
        ("0", "Bill whistled past the house.", None), ("1", '"Quote.', None)]


def test_quotes_are_text(tmp_path):
    (tmp_path / "train.tsv").write_text(
        'index\tquestion\tsentence\tlabel\n'
        '0\t"Who wrote "The Tempest"?\tIt was "Shakespeare\tentailment\n'
        '1\tWhat is ""it""?\t"\tnot_entailment\n', encoding="utf-8")
    examples, _ = glue.read_train("qnli", str(tmp_path))
    assert [(example.text_a, example.text_b) for example in examples] == [
        ('"Who wrote "The Tempest"?', 'It was "Shakespeare'), ('What is ""it""?', '"')]


# A QQP train/dev file with the official train.tsv's kind of damage (a question split over two
# lines, line 4 and 5, the second is the one near line 97,931 of the real file) and other shapes.
_QQP_LINES = [
    "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",                    # 1 header
    "0\t1\t2\tHow do I learn Python?\tWhat is the best way to learn Python?\t1",  # 2
    '1\t3\t4\tWhy is the sky blue?\t"Why is the sea blue?\t0',               # 3 a quote is text
    '2\t5\t6\tWas Muhammad a real person? Was he "the Prophet',              # 4 4 columns
    '"\tWas Muhammad a real historical figure? What is the evidence for his existence?\t0',  # 5
    "",                                                                      # 6 empty
    "3\t7\t8\tIs this a question?\t\t0",                                     # 7 empty question2
    "4\t9\t10\tExtra tab?\tYes.\t1\t",                                       # 8 7 columns
    "5\t11\t12\tFive columns\tonly",                                         # 9 5 columns
    "6\t13\t14\tLast one?\tYes, last.\t0",                                   # 10
]
# Worked out by hand from the reference's QqpProcessor: it reads line[3], line[4], line[5] in a
# try and skips the line on IndexError (lines 4, 5, 9); enough columns are kept whatever they
# hold: the quote (3), an empty question2 (7; features then make a single-sentence input, as
# the reference's `if tokens_b`), a trailing tab (8: the label is still column 5). The empty
# line 6 would stop the reference (its `guid = line[0]` is outside the try); we skip and count it.
_QQP_KEPT = [("0", "How do I learn Python?", "What is the best way to learn Python?", "1", 2),
             ("1", "Why is the sky blue?", '"Why is the sea blue?', "0", 3),
             ("3", "Is this a question?", "", "0", 7),
             ("4", "Extra tab?", "Yes.", "1", 8),
             ("6", "Last one?", "Yes, last.", "0", 10)]
_QQP_SKIPPED_LINES = (4, 5, 6, 9)


def test_qqp_train_and_dev_skip_short_lines_as_the_reference(tmp_path):
    # SPEC 8.2: QQP train and dev skip a line with too few columns and report it.
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / name).write_text("\n".join(_QQP_LINES) + "\n", encoding="utf-8")
    (tmp_path / "test.tsv").write_text("id\tquestion1\tquestion2\n0\tA?\tB?\n",
                                       encoding="utf-8")
    train, train_skipped = glue.read_train("qqp", str(tmp_path))
    (dev,) = glue.read_eval_sets("qqp", str(tmp_path), "dev")
    for examples, skipped, name in ((train, train_skipped, "train.tsv"),
                                    (dev.examples, dev.skipped, "dev.tsv")):
        path = str(tmp_path / name)
        assert _as_rows(examples, path) == _QQP_KEPT
        assert skipped == glue.SkipReport(path, _QQP_SKIPPED_LINES)
        assert skipped.message() == (f"{path}: skipped 4 lines with too few columns, as the "
                                     f"reference does for QQP: lines 4, 5, 6, 9")
        assert skipped.record() == {"source": path, "skipped": 4,
                                    "first_skipped_lines": [4, 5, 6, 9]}
    # Only the first five numbers are shown.
    assert glue.SkipReport("f", (1, 2, 3, 4, 5, 6)).message().endswith(": lines 1, 2, 3, 4, 5, ...")
    assert glue.SkipReport("f", (7,)).message().endswith(": line 7")

    # A test file must have every index: a short line is an error naming file and line.
    test = tmp_path / "test.tsv"
    test.write_text("id\tquestion1\tquestion2\n0\tA?\tB?\n1\tOnly one question?\n",
                    encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(
            f"{test}:3: 2 columns, expected 3 tab-separated columns (id, question1, "
            f"question2)")):
        glue.read_eval_sets("qqp", str(tmp_path), "test")
    # A file with nothing but short lines has no example at all.
    (tmp_path / "train.tsv").write_text(_QQP_LINES[0] + "\n" + _QQP_LINES[3] + "\n",
                                        encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(
            f"{tmp_path / 'train.tsv'}: empty file (every line after the header has fewer than "
            f"6 columns)")):
        glue.read_train("qqp", str(tmp_path))


@pytest.mark.parametrize("task, split, line", [
    ("mnli", "train", "0\t1\t1e\tletters\t( x )\t( y )\t(ROOT x)\t(ROOT y)\tA premise."),
    ("qnli", "dev", "0\tWho?"),
    ("sst2", "train", "A sentence without its label."),
    ("mrpc", "dev", "1\t702876\t702977\tOnly one string."),
])
def test_other_tasks_still_stop_at_a_short_line(tmp_path, task, split, line):
    # The reference crashes on these (IndexError); only QQP train/dev skip.
    data_path = write_glue_task(tmp_path, task, 3, 3, 3, 0)
    path = os.path.join(data_path, "train.tsv" if split == "train" else "dev.tsv")
    _replace_line(path, 3, line)
    with pytest.raises(ValueError, match=re.escape(f"{path}:3: {len(line.split(chr(9)))} "
                                                   "columns, expected")):
        if split == "train":
            glue.read_train(task, data_path)
        else:
            glue.read_eval_sets(task, data_path, split)


def test_extra_tabs_read_the_reference_columns(tmp_path):
    # Worked out from the reference processors: text and fixed labels by column number, the
    # other labels from line[-1] (SPEC 8.2 table), whatever the columns in between hold.
    rte, mrpc, sst2 = (tmp_path / "RTE", tmp_path / "MRPC", tmp_path / "SST-2")
    for folder in (rte, mrpc, sst2):
        folder.mkdir()
    (rte / "train.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n"
        "0\tA premise.\tA hypothesis.\tstray\tentailment\n", encoding="utf-8")
    (mrpc / "train.tsv").write_text(
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        "1\t11\t12\tString one.\tString two.\textra\n", encoding="utf-8")
    (sst2 / "train.tsv").write_text("sentence\tlabel\nA sentence.\t1\t\n", encoding="utf-8")
    assert [(e.text_a, e.text_b, e.label) for e in glue.read_train("rte", str(rte))[0]] == [
        ("A premise.", "A hypothesis.", "entailment")]
    assert [(e.text_a, e.text_b, e.label) for e in glue.read_train("mrpc", str(mrpc))[0]] == [
        ("String one.", "String two.", "1")]
    assert [(e.text_a, e.label) for e in glue.read_train("sst2", str(sst2))[0]] == [
        ("A sentence.", "1")]
    # A trailing tab makes line[-1] empty: the reference stops (KeyError in its label map).
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n"
                                   "0\tP.\tH.\tnot_entailment\t\n", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{rte / 'train.tsv'}:2: unknown label ''")):
        glue.read_train("rte", str(rte))


def test_ax_beside_or_inside_the_mnli_folder(tmp_path):
    data_path = write_glue_task(tmp_path, "mnli", 2, 2, 3, 0)
    assert [eval_set.name for eval_set in glue.read_eval_sets("mnli", data_path, "test")] == [
        "test", "test_mismatched", "ax"]
    os.replace(tmp_path / "diagnostic" / "diagnostic.tsv", os.path.join(data_path,
                                                                       "diagnostic.tsv"))
    eval_sets = glue.read_eval_sets("mnli", data_path, "test")
    assert eval_sets[2].name == "ax" and len(eval_sets[2].examples) == 3
    assert eval_sets[2].examples[0].source == os.path.join(data_path, "diagnostic.tsv") + ":2"
    os.remove(os.path.join(data_path, "diagnostic.tsv"))
    assert [eval_set.name for eval_set in glue.read_eval_sets("mnli", data_path, "test")] == [
        "test", "test_mismatched"]


def test_labels():
    assert glue.labels("mnli") == ("contradiction", "entailment", "neutral")
    assert glue.labels("qnli") == glue.labels("rte") == ("entailment", "not_entailment")
    for task in ("cola", "sst2", "mrpc", "qqp", "wnli"):
        assert glue.labels(task) == ("0", "1")
    assert glue.labels("stsb") is None
    with pytest.raises(ValueError, match="unknown GLUE task 'sts-b'; use one of cola, sst2"):
        glue.labels("sts-b")


def _replace_line(path: str, number: int, text: str) -> None:
    lines = open(path, encoding="utf-8").read().split("\n")
    lines[number - 1] = text
    open(path, "w", encoding="utf-8").write("\n".join(lines))


def test_errors_name_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"GLUE data folder {tmp_path / 'RTE'} does not "
                                                f"exist; give the rte folder"):
        glue.read_train("rte", str(tmp_path / "RTE"))
    rte = write_glue_task(tmp_path, "rte", 4, 4, 4, 0)
    os.remove(os.path.join(rte, "dev.tsv"))
    with pytest.raises(ValueError, match=re.escape(f"GLUE task rte needs dev.tsv in {rte} ")):
        glue.read_eval_sets("rte", rte, "dev")
    with pytest.raises(ValueError, match="unknown GLUE split 'validation'; use dev or test"):
        glue.read_eval_sets("rte", rte, "validation")

    train = os.path.join(rte, "train.tsv")
    _replace_line(train, 3, "2\tA sentence.\tnot_entailment")
    with pytest.raises(ValueError, match=re.escape(
            f"{train}:3: 3 columns, expected 4 tab-separated columns (index, sentence1, "
            f"sentence2, label)")):
        glue.read_train("rte", rte)
    _replace_line(train, 3, "2\tA sentence.\tAnother.\tmaybe")
    with pytest.raises(ValueError, match=re.escape(
            f"{train}:3: unknown label 'maybe'; the rte labels are entailment, "
            f"not_entailment")):
        glue.read_train("rte", rte)
    open(train, "w").write("")
    with pytest.raises(ValueError, match=re.escape(f"{train}: empty file (no lines)")):
        glue.read_train("rte", rte)
    open(train, "w").write("index\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(ValueError, match=re.escape(f"{train}: empty file (only a header line)")):
        glue.read_train("rte", rte)

    stsb = write_glue_task(tmp_path, "stsb", 4, 4, 4, 0)
    dev = os.path.join(stsb, "dev.tsv")
    fields = open(dev).read().split("\n")[4].split("\t")
    _replace_line(dev, 5, "\t".join(fields[:-1] + ["n/a"]))
    with pytest.raises(ValueError, match=re.escape(f"{dev}:5: STS-B score 'n/a' is not a number")):
        glue.read_eval_sets("stsb", stsb, "dev")

    mnli = write_glue_task(tmp_path, "mnli", 4, 4, 4, 0)
    test = os.path.join(mnli, "test_mismatched.tsv")
    _replace_line(test, 2, "0\t1\t1e\tletters\tA\tB")
    with pytest.raises(ValueError, match=re.escape(f"{test}:2: 6 columns, expected 10")):
        glue.read_eval_sets("mnli", mnli, "test")


def test_write_predictions_round_trip(tmp_path):
    data_path = write_glue_task(tmp_path / "glue", "mnli", 2, 2, 5, 0)
    rng = np.random.default_rng(0)
    for eval_set in glue.read_eval_sets("mnli", data_path, "test"):
        predictions = [glue.labels("mnli")[i] for i in rng.integers(0, 3, len(eval_set.examples))]
        path = glue.write_predictions(str(tmp_path / "out"), eval_set, predictions)
        assert path == str(tmp_path / "out" / eval_set.submission_file)
        with open(path, encoding="utf-8", newline="") as file:
            rows = list(csv.reader(file, delimiter="\t"))
        assert rows[0] == ["index", "prediction"]
        assert rows[1:] == [[example.id, prediction]
                            for example, prediction in zip(eval_set.examples, predictions)]
    assert sorted(os.listdir(tmp_path / "out")) == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv"]

    stsb = write_glue_task(tmp_path / "glue", "stsb", 2, 2, 3, 0)
    (test,) = glue.read_eval_sets("stsb", stsb, "test")
    path = glue.write_predictions(str(tmp_path / "out"), test, [4.25, np.float32(0.1), "3"])
    assert open(path).read() == "index\tprediction\n0\t4.25\n1\t0.1\n2\t3\n"
    with pytest.raises(ValueError, match="STS-B prediction 'high' for example 2 .* is not a "
                                         "finite number"):
        glue.write_predictions(str(tmp_path / "out"), test, [1.0, 2.0, "high"])
    with pytest.raises(ValueError, match="2 predictions for the 3 examples of test"):
        glue.write_predictions(str(tmp_path / "out"), test, [1.0, 2.0])
    rte = write_glue_task(tmp_path / "glue", "rte", 2, 2, 2, 0)
    (test,) = glue.read_eval_sets("rte", rte, "test")
    with pytest.raises(ValueError, match="prediction 'neutral' for example 1 .* unknown label "
                                         "'neutral'; the rte labels are entailment"):
        glue.write_predictions(str(tmp_path / "out"), test, ["entailment", "neutral"])
    assert not [name for name in os.listdir(tmp_path / "out") if name.endswith(".tmp")]


# --- TFDS -------------------------------------------------------------------------------------

class _Records(list):
    """A data source of given records, with the real builder's DatasetInfo."""

    def __init__(self, records, dataset_info):
        super().__init__(records)
        self.dataset_info = dataset_info


def _mock_tfds(records_by_split):
    """tfds.data_source serving records_by_split[(config, split)] with the builder's real
    features (MockPolicy.USE_CODE takes them from the installed package); records the splits
    asked for."""
    requested = []

    def as_data_source(builder, split, decoders=None, deserialize_method=None, **kwargs):
        del decoders, deserialize_method, kwargs
        requested.append((builder.info.config_name, split))
        return _Records(records_by_split[(builder.info.config_name, split)], builder.info)

    context = tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE,
                                     as_data_source_fn=as_data_source)
    return context, requested


def _nli_record(idx, premise, hypothesis, label):
    return {"premise": premise.encode(), "hypothesis": hypothesis.encode(),
            "label": np.int64(label), "idx": np.int32(idx)}


def test_tfds_mnli_labels_by_name_and_splits():
    # TFDS orders MNLI's classes entailment, neutral, contradiction.
    records = {("mnli", "train"): [_nli_record(2, "p2", "h2", 2), _nli_record(0, "p0", "h0", 0),
                                   _nli_record(1, "p1", "h1", 1)],
               ("mnli", "validation_matched"): [_nli_record(0, "matched", "h", 1)],
               ("mnli", "validation_mismatched"): [_nli_record(0, "mismatched", "h", 2)],
               ("mnli", "test_matched"): [_nli_record(0, "test matched", "h", -1)],
               ("mnli", "test_mismatched"): [_nli_record(0, "test mismatched", "h", -1)],
               ("ax", "test"): [_nli_record(0, "diagnostic", "h", -1)]}
    context, requested = _mock_tfds(records)
    with context:
        train, train_skipped = glue.read_tfds_train("mnli", "glue/mnli")
        dev = glue.read_tfds_eval_sets("mnli", "glue/mnli", "dev")
        test = glue.read_tfds_eval_sets("mnli", "glue/mnli", "test")
    # Sorted by idx; labels by class name, so the reference ids are 1, 2, 0 (SPEC 8.2 order).
    assert [(example.id, example.text_a, example.text_b, example.label)
            for example in train] == [("0", "p0", "h0", "entailment"),
                                      ("1", "p1", "h1", "neutral"),
                                      ("2", "p2", "h2", "contradiction")]
    assert [glue.labels("mnli").index(example.label) for example in train] == [1, 2, 0]
    assert train_skipped == glue.SkipReport("TFDS glue/mnli split train", (), "idx")
    assert [(s.name, s.submission_file, s.examples[0].text_a, s.examples[0].label)
            for s in dev] == [("dev", "MNLI-m.tsv", "matched", "neutral"),
                              ("dev_mismatched", "MNLI-mm.tsv", "mismatched", "contradiction")]
    assert [(s.name, s.submission_file, s.examples[0].text_a, s.examples[0].label)
            for s in test] == [("test", "MNLI-m.tsv", "test matched", None),
                               ("test_mismatched", "MNLI-mm.tsv", "test mismatched", None),
                               ("ax", "AX.tsv", "diagnostic", None)]
    assert requested == [("mnli", "train"), ("mnli", "validation_matched"),
                         ("mnli", "validation_mismatched"), ("mnli", "test_matched"),
                         ("mnli", "test_mismatched"), ("ax", "test")]


def test_tfds_binary_and_regression_tasks():
    records = {("cola", "train"): [{"sentence": b"Good.", "label": np.int64(1), "idx": 0},
                                   {"sentence": b"Bad bad.", "label": np.int64(0), "idx": 1}],
               ("stsb", "validation"): [{"sentence1": b"a", "sentence2": b"b",
                                         "label": np.float32(3.8), "idx": 0}],
               ("stsb", "test"): [{"sentence1": b"a", "sentence2": b"b",
                                   "label": np.float32(-1.0), "idx": 0}],
               ("qnli", "validation"): [{"question": b"Who?", "sentence": b"Me.",
                                         "label": np.int64(1), "idx": 4}],
               ("sst2", "train"): [{"sentence": b"Fine.", "label": np.int64(1), "idx": 0}]}
    context, requested = _mock_tfds(records)
    with context:
        cola, _ = glue.read_tfds_train("cola", "glue/cola")
        (stsb_dev,) = glue.read_tfds_eval_sets("stsb", "glue/stsb", "dev")
        (stsb_test,) = glue.read_tfds_eval_sets("stsb", "glue/stsb", "test")
        (qnli_dev,) = glue.read_tfds_eval_sets("qnli", "glue/qnli", "dev")
        with pytest.raises(ValueError, match="TFDS dataset glue/sst2 has no feature premise"):
            glue.read_tfds_train("mnli", "glue/sst2")
    # TFDS calls CoLA's classes unacceptable, acceptable: the file's 0 and 1.
    assert [(example.text_a, example.text_b, example.label) for example in cola] == [
        ("Good.", None, "1"), ("Bad bad.", None, "0")]
    assert float(stsb_dev.examples[0].label) == np.float32(3.8)
    assert stsb_dev.name == "dev" and stsb_dev.submission_file == "STS-B.tsv"
    assert stsb_test.examples[0].label is None
    assert qnli_dev.examples[0] == TextExample(
        "4", "Who?", "Me.", "not_entailment", "TFDS glue/qnli split validation record 0")
    assert ("stsb", "validation") in requested and ("stsb", "test") in requested


def test_tfds_random_mock_data_source():
    # The real ArrayRecordDataSource path with TFDS's generated examples.
    with tfds.testing.mock_data(num_examples=5, policy=tfds.testing.MockPolicy.USE_CODE):
        examples, _ = glue.read_tfds_train("mnli", "glue/mnli")
        raw = tfds.data_source("glue/mnli", split="train")
        names = raw.dataset_info.features["label"].names
        expected = sorted((int(record["idx"]), str(record["premise"]), names[record["label"]])
                          for record in raw)
    assert [(int(example.id), example.text_a, example.label)
            for example in examples] == expected


def _qqp_tfds_records(path: str) -> list[dict]:
    """The records TFDS's glue builder generates from a QQP file: its own code on our file."""
    import tensorflow_datasets.text.glue  # noqa: F401
    builder = tfds.builder("glue/qqp", data_dir=os.path.dirname(path))
    return [record for _, record in builder._generate_examples(data_file=path, split="train")]


def test_tfds_qqp_reports_the_rows_tfds_dropped(tmp_path):
    # TFDS drops a row with too few columns itself and keeps each row's number as `idx`, so a
    # dropped row is a missing idx. The file's short lines 4, 5, 9 are data rows 2, 3, 6 (TFDS
    # skips the empty line 6 without numbering it).
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(_QQP_LINES) + "\n", encoding="utf-8")
    records = _qqp_tfds_records(str(path))
    assert [record["idx"] for record in records] == [0, 1, 4, 5, 7]
    test_records = [dict(record, label=-1) for record in records]
    context, _ = _mock_tfds({("qqp", "train"): records[::-1],
                             ("qqp", "validation"): records[:2],
                             ("qqp", "test"): test_records})
    with context:
        train, skipped = glue.read_tfds_train("qqp", "glue/qqp")
        (dev,) = glue.read_tfds_eval_sets("qqp", "glue/qqp", "dev")
        with pytest.raises(ValueError, match=re.escape(
                "TFDS glue/qqp split test has no rows idx 2, 3, 6 (3 rows; TFDS drops a row with "
                "too few columns): a QQP prediction file needs every index")):
            glue.read_tfds_eval_sets("qqp", "glue/qqp", "test")
    # The same examples as the file reader keeps; TFDS's index is the row number.
    assert [(example.text_a, example.text_b, example.label) for example in train] == [
        (text_a, text_b, label) for _, text_a, text_b, label, _ in _QQP_KEPT]
    assert [example.id for example in train] == ["0", "1", "4", "5", "7"]
    assert skipped == glue.SkipReport("TFDS glue/qqp split train", (2, 3, 6), "idx")
    assert skipped.message() == ("TFDS glue/qqp split train: 3 rows missing (TFDS drops rows "
                                 "with too few columns, as the reference does for QQP): idx 2, 3, 6")
    assert skipped.record()["first_skipped_idx"] == [2, 3, 6]
    assert dev.skipped == glue.SkipReport("TFDS glue/qqp split validation", (), "idx")
