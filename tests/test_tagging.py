"""Token classification on your own files and fill-mask on a pretraining run.

One tiny pretraining run (module fixture) is both the init_from of a CoNLL tagging run (fine-tuned
through the CLI, then evaluated, predicted and exported) and the workdir fill-mask reads; the
entity scores are checked against seqeval itself, the exports against transformers.

The learning task is built from the demo corpus's sentences (real text): the words after "the"
are entities of type DEF, after "a"/"an" of type INDEF, up to a stop word or the end of a clause
(at most 3 words). The tokenizer lower-cases, so a word's own pieces do not say whether it is one:
the model has to read the word before it (and the run's start) from context.
"""
import json
import random
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import seqeval.metrics
import torch
import transformers
from seqeval.metrics.sequence_labeling import precision_recall_fscore_support

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune import fill_mask
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.core import entities
from albert_jax.finetune.core.examples import Sentence
from albert_jax.finetune.custom import tagging_data
from albert_jax.finetune.custom.tagging_task import CustomTokenClassificationTask
from albert_jax.finetune.demo import demo_sentences
from albert_jax.finetune.kinds import token_features
from cli_fixtures import cli
from configs import custom as custom_config

# --- The entity rule of the tagging data ---------------------------------------------------------

_STOP = set("the a an of to in is and or for with that this it be by as on if not are from at "
            "which when will can no all any its into but was may should must than".split())
_DETERMINERS = {"the": "DEF", "a": "INDEF", "an": "INDEF"}
MAX_WORDS = 3


def determiner_tags(words: list[str]) -> list[str]:
    """DEF / INDEF entities: up to 3 non-stop words after the / a / an, ending at punctuation."""
    tags = ["O"] * len(words)
    for position, word in enumerate(words[:-1]):
        kind = _DETERMINERS.get(word.lower())
        if kind is None:
            continue
        for offset, following in enumerate(words[position + 1:position + 1 + MAX_WORDS]):
            bare = re.sub(r"\W+$", "", following).lower()
            if not bare or bare in _STOP:
                break
            tags[position + 1 + offset] = ("B-" if offset == 0 else "I-") + kind
            if bare != following.lower():  # punctuation ends the clause
                break
    return tags


def write_conll(path: Path, sentences: list[list[str]], tags: list[list[str]] | None = None,
                docstart: bool = True) -> Path:
    """CoNLL-2003's layout: -DOCSTART-, token POS tag (the POS column a placeholder)."""
    lines = ["-DOCSTART- -X- O", ""] if docstart else []
    for number, words in enumerate(sentences):
        for position, word in enumerate(words):
            lines.append(f"{word} X" + (f" {tags[number][position]}" if tags else ""))
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- Entities: exactly seqeval's --------------------------------------------------------------------

EDGE_CASES = [
    ([], []),
    (["O", "O"], ["O", "O"]),
    (["B-PER", "I-PER"], ["O", "O"]),
    (["O", "O"], ["I-PER", "I-PER"]),  # I after O starts an entity
    (["B-PER", "I-LOC", "I-LOC"], ["B-PER", "B-LOC", "I-LOC"]),  # a type change starts one
    (["B-PER", "B-PER", "I-PER"], ["B-PER", "I-PER", "I-PER"]),
    (["I-MISC"], ["I-MISC"]),
    (["B-A", "I-B", "I-A", "O", "I-A"], ["I-A", "I-A", "I-A", "O", "B-A"]),
]


def _random_tags(rng: random.Random, length: int) -> list[str]:
    return [rng.choice(["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"])
            for _ in range(length)]


def test_entity_scores_equal_seqeval():
    rng = random.Random(0)
    cases = [([gold], [predicted]) for gold, predicted in EDGE_CASES]
    for _ in range(200):
        lengths = [rng.randint(0, 12) for _ in range(rng.randint(1, 6))]
        cases.append(([_random_tags(rng, n) for n in lengths], [_random_tags(rng, n) for n in lengths]))
    for gold, predicted in cases:
        ours = entities.entity_scores(gold, predicted)
        if not any(gold) and not any(predicted):
            continue  # seqeval has no score for no word at all
        with warnings.catch_warnings():  # seqeval warns where a ratio has no denominator
            warnings.simplefilter("ignore")
            assert ours["f1"] == seqeval.metrics.f1_score(gold, predicted)
            assert ours["precision"] == seqeval.metrics.precision_score(gold, predicted)
            assert ours["recall"] == seqeval.metrics.recall_score(gold, predicted)
            assert ours["accuracy"] == pytest.approx(seqeval.metrics.accuracy_score(gold, predicted))
            precision, recall, f1, support = precision_recall_fscore_support(gold, predicted)
        kinds = sorted(ours["per_type"])
        assert [ours["per_type"][kind]["f1"] for kind in kinds] == pytest.approx(list(f1))
        assert [ours["per_type"][kind]["support"] for kind in kinds] == list(support)
        assert entities.entities(predicted[0]) == [
            (kind, start, end + 1) for kind, start, end in
            seqeval.metrics.sequence_labeling.get_entities(predicted[0])]


# --- Reading ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme, raw, iob2", [
    ("iob1", ["I-PER", "I-PER", "B-PER", "O", "I-LOC"], ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]),
    ("bioes", ["B-PER", "E-PER", "S-LOC", "S-LOC", "B-ORG", "I-ORG", "E-ORG", "E-ORG"],
     ["B-PER", "I-PER", "B-LOC", "B-LOC", "B-ORG", "I-ORG", "I-ORG", "B-ORG"]),
    ("iob2", ["O", "I-PER", "B-LOC", "I-PER"], ["O", "B-PER", "B-LOC", "B-PER"]),
])
def test_schemes_read_as_iob2_with_the_same_entities(scheme, raw, iob2):
    assert list(tagging_data.to_iob2(raw, scheme, ["f:1"] * len(raw))) == iob2
    if scheme != "bioes":  # seqeval's default mode reads IOB1/IOB2 alike
        assert entities.entities(iob2) == [
            (kind, start, end + 1) for kind, start, end in
            seqeval.metrics.sequence_labeling.get_entities(raw)]


def test_conll_and_jsonl_read_the_same_sentences(tmp_path):
    words = [["John", "lives", "in", "New", "York"], ["Hi"]]
    tags = [["B-PER", "O", "O", "B-LOC", "I-LOC"], ["O"]]
    conll = write_conll(tmp_path / "a.conll", words, tags)
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n"
                                              for w, t in zip(words, tags)))
    columns = tagging_data.TagColumns()
    from_conll = tagging_data.read_file(str(conll), columns)
    from_jsonl = tagging_data.read_file(str(tmp_path / "a.jsonl"), columns)
    assert [(s.id, s.tokens, s.tags) for s in from_conll] == [
        (s.id, s.tokens, s.tags) for s in from_jsonl] == [
        ("0", tuple(words[0]), tuple(tags[0])), ("1", ("Hi",), ("O",))]
    assert from_conll[0].source == f"{conll}:3"  # after -DOCSTART- and its blank line
    assert tagging_data.label_list(from_conll) == ("O", "B-LOC", "B-PER", "I-LOC")


@pytest.mark.parametrize("text, message", [
    ("John B-PER\nSmith\n", "a.conll:2: token 'Smith' has no tag"),
    ("John X-PER\n", "a.conll:1: tag 'X-PER' is not of the iob2 form"),
    ("\n-DOCSTART- O\n\n", "a.conll: no sentences"),
], ids=["no-tag", "bad-tag", "no-sentences"])
def test_bad_conll_is_one_line_naming_the_line(tmp_path, text, message):
    (tmp_path / "a.conll").write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        tagging_data.read_file(str(tmp_path / "a.conll"), tagging_data.TagColumns())
    assert "\n" not in str(error.value)


def test_bad_jsonl_is_one_line_naming_the_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"tokens": ["a", " "], "tags": ["O", "O"]}) + "\n")
    with pytest.raises(ValueError, match=re.escape("a.jsonl:1: an empty token ' '")):
        tagging_data.read_file(str(path), tagging_data.TagColumns())
    path.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    with pytest.raises(ValueError, match=re.escape("a.jsonl:1: 2 tokens but 1 tags")):
        tagging_data.read_file(str(path), tagging_data.TagColumns())


# --- Pieces and windows ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spm(demo_pretraining_data) -> str:
    """The tokenizer of the shared pretraining data (vocab 400, trained on demo documents)."""
    return str(demo_pretraining_data["data.tokenizer"])


@pytest.mark.parametrize("label_all_pieces", [False, True])
def test_every_word_is_predicted_once_from_its_most_context_window(spm, label_all_pieces):
    tokenizer = tokenizer_lib.Tokenizer.load(spm)
    words = " ".join(demo_sentences()[:6]).split()  # ~60 words, ~100 pieces
    tags = determiner_tags(words)
    sentence = Sentence("0", tuple(words), tuple(tags), "f:1")
    labels = ("O", "B-DEF", "B-INDEF", "I-DEF", "I-INDEF")
    label_ids = {tag: index for index, tag in enumerate(labels)}
    arrays = token_features.build([sentence], tokenizer, seq_len=24, doc_stride=7,
                                    label_ids=label_ids, label_all_pieces=label_all_pieces)
    pieces = token_features.word_pieces(tokenizer, words)
    assert len(arrays["input_ids"]) > 5  # many windows
    predicted = [(row, position) for row, position in zip(*np.nonzero(arrays["word_index"] >= 0))]
    assert sorted(arrays["word_index"][row, position] for row, position in predicted) == list(
        range(len(words)))
    # Each word's row is the window where its first piece has the most context (by hand).
    first_piece = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    for row, position in predicted:
        word = arrays["word_index"][row, position]
        start = first_piece[word] - (position - 1)  # the row's first piece
        scores = []
        for other_row in range(len(arrays["input_ids"])):
            other_start = start + (other_row - row) * 7
            length = int(arrays["input_mask"][other_row].sum()) - 2
            offset = first_piece[word] - other_start
            scores.append(min(offset, length - 1 - offset) + 0.01 * length
                          if 0 <= offset < length else -np.inf)
        assert row == int(np.argmax(scores))
        assert arrays["input_ids"][row, position] == pieces[word][0]
        assert arrays["labels"][row, position] == label_ids[tags[word]]
    # The other pieces: ignored, or the word's tag (B-X as I-X) with label_all_pieces.
    labelled = (arrays["labels"] != token_features.IGNORED).sum(axis=1)
    real = arrays["input_mask"].sum(axis=1) - 2
    if label_all_pieces:
        assert (labelled == real).all()
    else:
        assert (labelled < real).any()


# --- A tagging run through the CLI, from a pretraining run ---------------------------------------

SMALL = ["--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
         "--config.total_steps=4", "--config.eval_every_steps=2",
         "--config.checkpoint_every_steps=2", "--config.log_every_steps=2"]


def _tagged(sentences: list[str]) -> tuple[list[list[str]], list[list[str]]]:
    words = [sentence.split() for sentence in sentences]
    return words, [determiner_tags(w) for w in words]


# The run learns the determiner entities of real text: 1,200 steps of batch 32, on one CPU
# device (cli_fixtures.one_device_environment).
LEARNING = ["--config.seq_len=32", "--config.batch_size=32", "--config.eval_batch_size=64",
            "--config.total_steps=1200", "--config.optim.lr=2e-3",
            "--config.optim.warmup_steps=120", "--config.dropout=0.0",
            "--config.classifier_dropout=0.0", "--config.eval_every_steps=600",
            "--config.checkpoint_every_steps=600", "--config.log_every_steps=300"]


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory, pretrained_tiny) -> Path:
    """A tagging run on CoNLL files of real sentences, fine-tuned from `pretrained_tiny`: 300
    dev sentences and one longer than a row (windows), the train file the rest."""
    root = tmp_path_factory.mktemp("ner")
    sentences = demo_sentences(min_words=6, max_words=16)
    write_conll(root / "train.conll", *_tagged(sentences[300:]))
    dev_words, dev_tags = _tagged(sentences[:300])
    long_words = " ".join(sentences[300:304]).split()  # ~45 words, more pieces than seq_len 32
    dev_words.append(long_words)
    dev_tags.append(determiner_tags(long_words))
    write_conll(root / "dev.conll", dev_words, dev_tags)
    write_conll(root / "new.conll", dev_words, docstart=False)  # no tags: predict's input
    workdir = root / "run"
    result = cli("finetune", "--config=configs/custom.py:kind=token_classification,runlocal",
                 f"--config.init_from={pretrained_tiny}", f"--workdir={workdir}",
                 f"--config.data.train_file={root / 'train.conll'}",
                 f"--config.data.dev_file={root / 'dev.conll'}", "--config.data.doc_stride=8",
                 *LEARNING)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Initialised the backbone from" in result.stdout
    return workdir


@pytest.mark.slow
def test_evaluate_and_predict_agree_and_f1_is_seqeval_s(ner_run):
    root = ner_run.parent
    assert json.loads((ner_run / "labels.json").read_text()) == [
        "O", "B-DEF", "B-INDEF", "I-DEF", "I-INDEF"]
    finetune_run.evaluate(str(ner_run), "dev")  # what `albert-jax evaluate` runs
    evaluated = _jsonl(ner_run / "predictions" / "dev" / "predictions.jsonl")
    metrics = json.loads((ner_run / "predictions" / "dev" / "metrics.json").read_text())
    gold = [list(s.tags) for s in tagging_data.read_file(str(root / "dev.conll"),
                                                         tagging_data.TagColumns())]
    predicted = [record["tags"] for record in evaluated]
    assert [len(tags) for tags in predicted] == [len(tags) for tags in gold]
    assert len(gold[-1]) > 30  # the long sentence: every word tagged, across windows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert metrics["f1"] == pytest.approx(seqeval.metrics.f1_score(gold, predicted), abs=1e-12)
        assert metrics["precision"] == pytest.approx(seqeval.metrics.precision_score(gold, predicted), abs=1e-12)
        assert metrics["recall"] == pytest.approx(seqeval.metrics.recall_score(gold, predicted), abs=1e-12)
        assert metrics["accuracy"] == pytest.approx(seqeval.metrics.accuracy_score(gold, predicted))
    assert set(metrics["per_type"]) <= {"DEF", "INDEF"} and "step" in metrics
    for record in evaluated:
        assert [(e["type"], e["start"], e["end"]) for e in record["entities"]] == \
            entities.entities(record["tags"])
        assert all(e["text"] == " ".join(record["tokens"][e["start"]:e["end"]])
                   for e in record["entities"])

    # predict on the same words without tags, in process (the CLI's code path)
    output = root / "new.predictions.jsonl"
    finetune_run.predict(str(ner_run), str(root / "new.conll"), str(output))
    assert [(r["id"], r["tokens"], r["tags"]) for r in _jsonl(output)] == [
        (r["id"], r["tokens"], r["tags"]) for r in evaluated]


@pytest.mark.slow
def test_huggingface_export_tags_as_we_do(ner_run, tmp_path):
    exported = tmp_path / "hf"
    finetune_run.export_huggingface(str(ner_run), str(exported))
    model = transformers.AlbertForTokenClassification.from_pretrained(exported).eval()
    labels = json.loads((ner_run / "labels.json").read_text())
    assert [model.config.id2label[index] for index in range(len(labels))] == labels
    tokenizer = transformers.AlbertTokenizer(str(exported / "spiece.model"))
    evaluated = ner_run / "predictions" / "dev" / "predictions.jsonl"
    if not evaluated.exists():  # this test alone
        finetune_run.evaluate(str(ner_run), "dev")
    records = _jsonl(evaluated)
    compared = 0
    for record in records[:-1]:  # the short sentences: one row each
        ids, first = [tokenizer.cls_token_id], []
        for word in record["tokens"]:
            first.append(len(ids))
            ids += tokenizer.encode(word, add_special_tokens=False) or [tokenizer.unk_token_id]
        ids.append(tokenizer.sep_token_id)
        if len(ids) > 32:
            continue
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
        assert [labels[i] for i in logits[first].argmax(-1)] == record["tags"]
        compared += 1
    assert compared >= 5


def test_a_dev_tag_training_never_saw_is_one_line_and_writes_nothing(tmp_path, pretrained_tiny):
    words = [["the", "red", "car"], ["a", "dog"]]
    write_conll(tmp_path / "train.conll", words, [["O", "B-DEF", "I-DEF"], ["O", "B-INDEF"]])
    write_conll(tmp_path / "dev.conll", words, [["O", "B-DEF", "I-DEF"], ["O", "B-ANIMAL"]])
    workdir = tmp_path / "run"
    result = cli("finetune", "--config=configs/custom.py:kind=token_classification,runlocal",
                 f"--config.init_from={pretrained_tiny}", f"--workdir={workdir}",
                 f"--config.data.train_file={tmp_path / 'train.conll'}",
                 f"--config.data.dev_file={tmp_path / 'dev.conll'}", *SMALL)
    assert result.returncode != 0
    assert "dev.conll:8: tag 'B-ANIMAL' is not one of the 4 tags" in result.stderr
    assert "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if "error:" in line]) == 1
    assert not workdir.exists() or not any(workdir.iterdir())


@pytest.mark.parametrize("train, message", [
    ({"tokens": ["a", ""], "tags": ["O", "B-X"]}, "train.jsonl:1: an empty token ''"),
    ({"tokens": ["a", "b"], "tags": ["O"]}, "train.jsonl:1: 2 tokens but 1 tags"),
    ({"tokens": ["a", "b"], "tags": ["O", "O"]}, "every tag is 'O'"),
], ids=["empty-token", "token-without-tag", "no-entity"])
def test_bad_training_files_stop_the_task_before_anything_is_written(tmp_path, spm, train,
                                                                     message):
    (tmp_path / "train.jsonl").write_text(json.dumps(train) + "\n")
    config = custom_config.get_config("kind=token_classification,runlocal")
    config.tokenizer = spm
    config.data.train_file = config.data.dev_file = str(tmp_path / "train.jsonl")
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        CustomTokenClassificationTask.from_config(config)
    assert "\n" not in str(error.value)


# --- Fill-mask on the pretraining run --------------------------------------------------------------

FILL_MASK_TEXTS = ["Return the [MASK] of the file.", "Create a new [MASK] object with [MASK] values.",
                   "[MASK] the list, then sort it."]


def test_fill_mask_equals_the_huggingface_pipeline(pretrained_tiny, tmp_path):
    (tmp_path / "masked.jsonl").write_text("".join(json.dumps({"text": text}) + "\n"
                                                   for text in FILL_MASK_TEXTS))
    output = tmp_path / "masked.predictions.jsonl"
    result = cli("predict", f"--workdir={pretrained_tiny}", f"--input={tmp_path / 'masked.jsonl'}",
                 "--top_k=4", f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    records = _jsonl(output)
    assert [record["text"] for record in records] == FILL_MASK_TEXTS
    assert [len(record["masks"]) for record in records] == [1, 2, 1]

    exported = tmp_path / "hf"
    converted = cli("convert", "--from=orbax", f"--path={pretrained_tiny}", "--to=huggingface",
                    f"--output={exported}")  # the weights and the run's tokenizer files
    assert converted.returncode == 0, converted.stderr[-3000:]
    assert json.loads((exported / "config.json").read_text())["architectures"] == [
        "AlbertForPreTraining"]  # the MLM head is in it
    model = transformers.AlbertForMaskedLM.from_pretrained(exported).eval()
    mask_id = tokenizer_lib.Tokenizer.load(str(pretrained_tiny / "spiece.model")).mask_id
    for fast in (True, False):  # the export's own tokenizer files, as they are
        tokenizer = transformers.AutoTokenizer.from_pretrained(exported, use_fast=fast)
        assert [tokenizer(text)["input_ids"].count(mask_id) for text in FILL_MASK_TEXTS] == [
            1, 2, 1]  # each "[MASK]" of the text is the mask
        pipeline = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=4)
        for record in records:
            theirs = pipeline(record["text"])
            theirs = theirs if isinstance(theirs[0], list) else [theirs]
            for mine, their_mask in zip(record["masks"], theirs, strict=True):
                assert [entry["id"] for entry in mine] == [entry["token"] for entry in their_mask]
                assert [entry["probability"] for entry in mine] == pytest.approx(
                    [entry["score"] for entry in their_mask], rel=1e-4)
                assert [entry["piece"] for entry in mine] == tokenizer.convert_ids_to_tokens(
                    [entry["token"] for entry in their_mask])


def test_fill_mask_input_errors(pretrained_tiny, tmp_path):
    (tmp_path / "plain.txt").write_text("no mask here\n")
    with pytest.raises(ValueError, match=re.escape("plain.txt:1: no [MASK] in the text")):
        finetune_run.predict(str(pretrained_tiny), str(tmp_path / "plain.txt"),
                             str(tmp_path / "out.jsonl"))
    assert not (tmp_path / "out.jsonl").exists()
    assert fill_mask.MASK == "[MASK]"


# --- Learning: the determiner entities from real text ----------------------------------------------

def _unigram_baseline(train: list[tuple[list[str], list[str]]],
                      dev: list[tuple[list[str], list[str]]]) -> dict:
    """Each word's most frequent training tag (lower-cased: what the model's pieces show)."""
    counts: dict[str, dict[str, int]] = {}
    for words, tags in train:
        for word, tag in zip(words, tags):
            counts.setdefault(word.lower(), {}).setdefault(tag, 0)
            counts[word.lower()][tag] += 1
    guess = [[max(counts.get(w.lower(), {"O": 1}).items(), key=lambda item: item[1])[0]
              for w in words] for words, _ in dev]
    return entities.entity_scores([tags for _, tags in dev], guess)


@pytest.mark.slow
def test_tagging_learns_the_determiner_entities_from_real_text(ner_run):
    root = ner_run.parent
    columns = tagging_data.TagColumns()
    train = [(list(s.tokens), list(s.tags))
             for s in tagging_data.read_file(str(root / "train.conll"), columns)]
    dev = [(list(s.tokens), list(s.tags))
           for s in tagging_data.read_file(str(root / "dev.conll"), columns)]
    dev_tags = [tags for _, tags in dev]
    best = json.loads((ner_run / "best.json").read_text())
    unigram = _unigram_baseline(train, dev)
    all_outside = entities.entity_scores(dev_tags, [["O"] * len(t) for t in dev_tags])
    print(f"dev entity F1: model {best['f1']:.3f}, all-O {all_outside['f1']:.3f} (accuracy "
          f"{all_outside['accuracy']:.3f}), each word's most frequent tag {unigram['f1']:.3f}; "
          f"model accuracy {best['accuracy']:.3f}")
    assert best["f1"] > unigram["f1"] + 0.2, (best, unigram)
