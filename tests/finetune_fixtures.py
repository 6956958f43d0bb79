"""Writers of tiny GLUE and RACE datasets in the layouts of the official downloads, for tests,
and the fine-tuned MNLI run that several files share.

  data_path = write_glue_task(tmp_path, "mnli", num_train=8, num_dev=4, num_test=4, seed=0)
  # tmp_path/MNLI/{train,dev_matched,dev_mismatched,test_matched,test_mismatched}.tsv and
  # tmp_path/diagnostic/diagnostic.tsv, as download_glue_data.py leaves them; returns tmp_path/MNLI
  race_path = write_race(tmp_path, articles_per_level=2, questions_per_article=3, seed=0)
  run = finetune_mnli(root, pretrained_workdir)   # conftest.py's `finetuned_mnli`

The files follow the official ones byte for byte in form: UTF-8, tab-separated, "\\n" line ends,
the same header lines and columns (CoLA train/dev without a header), no quoting (some sentences
carry a bare `"`). The text is made of a small word list; labels are random, not learnable.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

from cli_fixtures import cli

WORDS = ("the a man woman child dog cat bird city river house road car train book letter song "
         "teacher doctor farmer market garden window door table morning evening night summer "
         "winter old young small big red green quiet happy tired new long short walked ran saw "
         "found wrote read sang built opened closed carried bought sold liked watched near over "
         "under behind across through before after with without and but because while").split()
_CONTRACTIONS = ("won't", "didn't", "it's", "they're")

# The folder of each task in glue_data/ and the classes written in its files.
GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
                "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}
_CLASSES = {"cola": ("0", "1"), "sst2": ("0", "1"), "mrpc": ("0", "1"), "qqp": ("0", "1"),
            "mnli": ("contradiction", "entailment", "neutral"),
            "qnli": ("entailment", "not_entailment"), "rte": ("entailment", "not_entailment"),
            "wnli": ("0", "1")}
_MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
                "sentence2"]
_MATCHED_GENRES = ("fiction", "government", "slate", "telephone", "travel")
_MISMATCHED_GENRES = ("facetoface", "letters", "nineeleven", "oup", "verbatim")


def sentence(rng: random.Random, min_words: int = 4, max_words: int = 12,
             end: str = ".") -> str:
    """A capitalised sentence of random words, now and then with a contraction, a comma or an
    unmatched double quote (GLUE text has them; readers must keep them)."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))]
    if rng.random() < 0.2:
        words[rng.randrange(len(words))] = rng.choice(_CONTRACTIONS)
    if rng.random() < 0.2:
        words[rng.randrange(len(words))] += ","
    if rng.random() < 0.2:
        position = rng.randrange(len(words))
        words[position] = '"' + words[position]
    return " ".join(words).capitalize() + end


def _write_lines(path: str, rows: list[list[str]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as file:
        file.write("".join("\t".join(row) + "\n" for row in rows))


def _parses(text: str) -> tuple[str, str]:
    """MNLI-style binary and constituency parses of a sentence (shape only)."""
    tokens = text.rstrip(".").split() + ["."]
    binary = "( " + " ".join(tokens) + " )"
    constituency = "(ROOT (S " + " ".join(f"(NN {token})" for token in tokens) + "))"
    return binary, constituency


def _task_rows(task: str, kind: str, count: int, rng: random.Random) -> list[list[str]]:
    """Header (when the file has one) and `count` data rows of one file; kind is train, dev,
    dev_mismatched, test, test_mismatched."""
    labelled = not kind.startswith("test")
    classes = _CLASSES.get(task)
    rows: list[list[str]] = []
    if task == "cola":
        if not labelled:
            rows.append(["index", "sentence"])
        for index in range(count):
            label = rng.choice(classes)
            source = rng.choice(("gj04", "bc01", "ks08", "r-67", "c_13", "m_02"))
            rows.append([source, label, "" if label == "1" else "*", sentence(rng)] if labelled
                        else [str(index), sentence(rng)])
    elif task == "sst2":
        rows.append(["sentence", "label"] if labelled else ["index", "sentence"])
        for index in range(count):
            # SST-2 text is lower-cased, space-tokenised and often ends in a space.
            text = sentence(rng, end="").lower() + rng.choice(("", " ", " . "))
            rows.append([text, rng.choice(classes)] if labelled else [str(index), text])
    elif task == "mrpc":
        rows.append(["Quality" if labelled else "index", "#1 ID", "#2 ID", "#1 String",
                     "#2 String"])
        for index in range(count):
            first = [rng.choice(classes)] if labelled else [str(index)]
            rows.append(first + [str(rng.randint(10_000, 3_999_999)),
                                 str(rng.randint(10_000, 3_999_999)), sentence(rng, 8, 20),
                                 sentence(rng, 8, 20)])
    elif task == "stsb":
        header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                  "sentence1", "sentence2"]
        rows.append(header + ["score"] if labelled else header)
        for index in range(count):
            row = [str(index), rng.choice(("main-captions", "main-news", "main-forums")),
                   rng.choice(("MSRvid", "headlines", "images", "deft-forum")),
                   rng.choice(("2012test", "2014", "2015", "2016")), f"{rng.randint(1, 1500):04d}",
                   "none", "none", sentence(rng), sentence(rng)]
            rows.append(row + [f"{rng.randint(0, 25) * 0.2:.3f}"] if labelled else row)
    elif task == "qqp":
        rows.append(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"] if labelled
                    else ["id", "question1", "question2"])
        for index in range(count):
            question1, question2 = sentence(rng, end="?"), sentence(rng, end="?")
            if labelled:
                pair_id = rng.randint(0, 400_000)
                rows.append([str(pair_id), str(2 * pair_id + 1), str(2 * pair_id + 2),
                             question1, question2, rng.choice(classes)])
            else:
                rows.append([str(index), question1, question2])
    elif task == "mnli":
        header = list(_MNLI_HEADER)
        if kind == "train":
            header += ["label1", "gold_label"]
        elif labelled:
            header += ["label1", "label2", "label3", "label4", "label5", "gold_label"]
        rows.append(header)
        genres = _MISMATCHED_GENRES if kind.endswith("mismatched") else _MATCHED_GENRES
        for index in range(count):
            premise, hypothesis = sentence(rng, 8, 20), sentence(rng)
            gold = rng.choice(classes)
            prompt_id = rng.randint(1, 150_000)
            premise_binary, premise_parse = _parses(premise)
            hypothesis_binary, hypothesis_parse = _parses(hypothesis)
            row = [str(index), str(prompt_id), f"{prompt_id}{gold[0]}", rng.choice(genres),
                   premise_binary, hypothesis_binary, premise_parse, hypothesis_parse, premise,
                   hypothesis]
            if kind == "train":
                row += [gold, gold]
            elif labelled:  # Five annotator labels, the majority being gold.
                row += [gold, gold, gold, rng.choice(classes), rng.choice(classes), gold]
            rows.append(row)
    elif task in ("qnli", "rte", "wnli"):
        names = ["question", "sentence"] if task == "qnli" else ["sentence1", "sentence2"]
        rows.append(["index"] + names + (["label"] if labelled else []))
        for index in range(count):
            first = sentence(rng, end="?") if task == "qnli" else sentence(rng, 8, 20)
            row = [str(index), first, sentence(rng)]
            rows.append(row + [rng.choice(classes)] if labelled else row)
    else:
        raise ValueError(f"unknown GLUE task {task!r}; use one of {', '.join(GLUE_FOLDERS)}")
    return rows


def write_glue_task(directory: str, task: str, num_train: int = 8, num_dev: int = 4,
                    num_test: int = 4, seed: int = 0) -> str:
    """Writes <directory>/<Folder>/ of GLUE `task` as the official download has it (MNLI: also
    <directory>/diagnostic/diagnostic.tsv with num_test rows); returns the task's folder."""
    rng = random.Random(f"{task}-{seed}")
    folder = os.path.join(os.fspath(directory), GLUE_FOLDERS.get(task, task))
    if task == "mnli":
        files = {"train.tsv": ("train", num_train),
                 "dev_matched.tsv": ("dev", num_dev),
                 "dev_mismatched.tsv": ("dev_mismatched", num_dev),
                 "test_matched.tsv": ("test", num_test),
                 "test_mismatched.tsv": ("test_mismatched", num_test)}
    else:
        files = {"train.tsv": ("train", num_train), "dev.tsv": ("dev", num_dev),
                 "test.tsv": ("test", num_test)}
    for file_name, (kind, count) in files.items():
        _write_lines(os.path.join(folder, file_name), _task_rows(task, kind, count, rng))
    if task == "mnli":
        _write_lines(os.path.join(os.fspath(directory), "diagnostic", "diagnostic.tsv"),
                     [["index", "sentence1", "sentence2"]] +
                     [[str(index), sentence(rng), sentence(rng)] for index in range(num_test)])
    return folder


def race_article(rng: random.Random, name: str, num_questions: int) -> dict:
    """One RACE article object (keys in the download's order); about a third of the questions
    have a blank "_" that the option fills."""
    paragraphs = [" ".join(sentence(rng, 6, 16) for _ in range(rng.randint(2, 4)))
                  for _ in range(rng.randint(1, 3))]
    questions = []
    for _ in range(num_questions):
        if rng.random() < 0.35:
            words = sentence(rng, 5, 9).split()
            words[rng.randrange(1, len(words))] = "_"
            questions.append(" ".join(words))
        else:
            questions.append(sentence(rng, 4, 9, end="?"))
    return {"answers": [rng.choice("ABCD") for _ in questions],
            "options": [[sentence(rng, 1, 5, end="") for _ in range(4)] for _ in questions],
            "questions": questions,
            "article": "\n".join(paragraphs),
            "id": name}


def write_race(directory: str, articles_per_level: int = 2, questions_per_article: int = 3,
               seed: int = 0, splits: tuple[str, ...] = ("train", "dev", "test")) -> str:
    """Writes <directory>/RACE/<split>/{middle,high}/<n>.txt, each one JSON article on one line
    as in the RACE download (id "<level><n>.txt"); returns <directory>/RACE."""
    rng = random.Random(seed)
    data_path = os.path.join(os.fspath(directory), "RACE")
    number = 0
    for split in splits:
        for level in ("middle", "high"):
            folder = os.path.join(data_path, split, level)
            os.makedirs(folder, exist_ok=True)
            for _ in range(articles_per_level):
                number += 1
                article = race_article(rng, f"{level}{number}.txt", questions_per_article)
                with open(os.path.join(folder, f"{number}.txt"), "w", encoding="utf-8") as file:
                    file.write(json.dumps(article))
    return data_path


def finetune_mnli(root: Path, pretrained: Path) -> dict[str, str]:
    """MNLI (12 train rows, 6 of each dev set, 5 of each test set and of AX) fine-tuned by
    `albert-jax finetune` from the pretraining workdir `pretrained` for 4 steps of batch 8 at
    seq_len 32, evaluated and checkpointed every 2: {"workdir": root/run, "data_path": its
    MNLI folder}."""
    data_path = write_glue_task(str(root / "glue_data"), "mnli", num_train=12, num_dev=6,
                                num_test=5, seed=1)
    workdir = root / "run"
    result = cli(*finetune_flags("configs/glue.py:task=mnli,runlocal", data_path, pretrained,
                                 workdir, total_steps=4))
    assert result.returncode == 0, result.stderr[-3000:]
    return {"workdir": str(workdir), "data_path": data_path}


def finetune_flags(config: str, data_path: str | Path, init_from: Path, workdir: Path,
                   total_steps: int, *more_flags: str) -> list[str]:
    """`albert-jax finetune --config=<config>` (e.g. `configs/race.py:runlocal`) on the data a
    writer here made, from `init_from`: seq 32, batch 8, evaluated, checkpointed and logged every
    2 steps."""
    return ["finetune", f"--config={config}",
            f"--config.data.path={data_path}", f"--config.init_from={init_from}",
            "--config.seq_len=32", "--config.batch_size=8", "--config.eval_batch_size=8",
            f"--config.total_steps={total_steps}", "--config.eval_every_steps=2",
            "--config.checkpoint_every_steps=2", "--config.log_every_steps=2", *more_flags,
            f"--workdir={workdir}"]
