"""Fine-tuning learns from real text: a sentence-pair task and a RACE-format task, both built from
the sentences of the stdlib docstrings (`corpus.demo_documents`), go from chance to well above
it from scratch in about half a CPU minute each, through the command line on one CPU device.

The pair task is clause order, the sentence-order objective of SPEC 4 at the scale of one
sentence: a sentence is cut in two and the halves come in order (label 1) or swapped (label 0).
Both labels hold exactly the same tokens, so no bag of words solves it: the model has to use
which segment each token is in, i.e. the pair input with its segment ids. Train, dev and test
sentences are disjoint, so the dev score is not memorisation.
"""
import dataclasses
import json
import random
from pathlib import Path

import pytest

from albert_jax.data import tokenizers as tokenizer_lib
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.core.task import real_rows
from albert_jax.finetune.demo import demo_sentences
from cli_fixtures import cli

_VOCAB_SIZE = 1000
_MRPC_HEADER = "#1 ID\t#2 ID\t#1 String\t#2 String"
_RACE_QUESTION = "How does the sentence that the passage begins go on?"


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokenizer") / "spm.model"
    return tokenizer_lib.train(demo_sentences(max_words=40), str(path), vocab_size=_VOCAB_SIZE)


@pytest.fixture(scope="module")
def sentence_pools() -> dict[str, list[str]]:
    """Disjoint dev / test / train sentences of 8 to 20 words."""
    sentences = demo_sentences(min_words=8, max_words=20)
    return {"dev": sentences[:400], "test": sentences[400:440], "train": sentences[440:]}


def _halves(sentence: str, rng: random.Random) -> tuple[str, str]:
    words = sentence.split()
    cut = rng.randint(len(words) * 2 // 5, len(words) * 3 // 5)
    return " ".join(words[:cut]), " ".join(words[cut:])


def write_clause_order_task(directory: Path, pools: dict[str, list[str]], num_train: int,
                            seed: int = 0) -> Path:
    """GLUE's MRPC layout: `Quality` 1 when #2 continues #1, 0 when the halves are swapped."""
    rng = random.Random(seed)
    path = directory / "MRPC"
    path.mkdir(parents=True)
    for split, count in (("train", num_train), ("dev", len(pools["dev"])),
                         ("test", len(pools["test"]))):
        lines = [("index\t" if split == "test" else "Quality\t") + _MRPC_HEADER]
        for row in range(count):
            first, second = _halves(pools[split][row % len(pools[split])], rng)
            in_order = row % 2 == 0  # exactly balanced: chance is 50 %
            pair = (first, second) if in_order else (second, first)
            lines.append("\t".join((str(row) if split == "test" else str(int(in_order)),
                                    str(2 * row), str(2 * row + 1)) + pair))
        (path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return path


def write_race_continuation_task(directory: Path, pools: dict[str, list[str]], num_train: int,
                                 seed: int = 0) -> Path:
    """RACE's layout (`<split>/{middle,high}/<n>.txt`, one JSON article each). The article is
    the first half of a sentence; the right option is its second half; the distractors are the
    second half of another sentence (only the article tells it apart) and the first halves of
    two others (they do not read as the end of a sentence)."""
    rng = random.Random(seed)
    for split, count in (("train", num_train), ("dev", len(pools["dev"]) // 2), ("test", 4)):
        pool = pools[split]
        for number in range(count):
            level = ("middle", "high")[number % 2]
            sentence = pool[number % len(pool)]
            article, answer_text = _halves(sentence, rng)
            others = [_halves(other, rng) for other in rng.sample(pool, 4) if other != sentence]
            options = [others[0][1]] + [first for first, _ in others[1:3]]
            answer = rng.randrange(4)
            options.insert(answer, answer_text)
            folder = directory / "RACE" / split / level
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{number}.txt").write_text(json.dumps(
                {"answers": ["ABCD"[answer]], "options": [options],
                 "questions": [_RACE_QUESTION], "article": article,
                 "id": f"{level}{number}.txt"}))
    return directory / "RACE"


def finetune_from_scratch(config: str, workdir: Path, tokenizer: str, steps: int,
                          *flags: str) -> dict:
    """`albert-jax finetune --config=CONFIG` of the tiny model (E=16, H=32, 2 layers) from
    scratch, lr 1e-3, batch 32, no dropout, on one CPU device; its best.json."""
    result = cli("finetune", f"--config={config}", f"--workdir={workdir}",
                 f"--config.tokenizer={tokenizer}", "--config.init_from=",
                 f"--config.model_overrides.vocab_size={_VOCAB_SIZE}",
                 "--config.batch_size=32", "--config.eval_batch_size=64", "--config.seq_len=48",
                 f"--config.total_steps={steps}", "--config.optim.lr=1e-3",
                 f"--config.optim.warmup_steps={steps // 10}", "--config.dropout=0.0",
                 "--config.classifier_dropout=0.0", f"--config.eval_every_steps={steps // 2}",
                 f"--config.checkpoint_every_steps={steps // 2}",
                 f"--config.log_every_steps={steps // 4}", *flags)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((workdir / "best.json").read_text())


@pytest.mark.slow
def test_pair_task_from_real_text_reaches_90_percent(spm_model, sentence_pools, tmp_path):
    steps = 300
    data_path = write_clause_order_task(tmp_path, sentence_pools, num_train=steps * 32)
    best = finetune_from_scratch("configs/glue.py:task=mrpc,runlocal", tmp_path / "run",
                                 spm_model, steps, f"--config.data.path={data_path}")
    # A 450-step run: 0.825 at step 150, 0.9725 at 200, 0.978 at 450.
    assert best["accuracy"] > 0.90, best  # measured: 0.9775 at step 300


@pytest.mark.slow
def test_race_format_task_from_real_text_is_well_above_chance(spm_model, sentence_pools,
                                                              tmp_path):
    steps = 100
    data_path = write_race_continuation_task(tmp_path, sentence_pools, num_train=steps * 32)
    best = finetune_from_scratch("configs/race.py:runlocal", tmp_path / "run", spm_model, steps,
                                 f"--config.data.path={data_path}", "--config.max_qa_length=32")
    # Chance is 25 %; ruling out the two first-half distractors alone gives 50 % (measured: 51.5 %).
    # A 300-step run was there by step 50 (0.54; 0.49-0.56 from then to step 300).
    # Measured at step 100: 0.615 (middle 0.61, high 0.62).
    assert best["accuracy"] > 0.40, best
    assert min(best["accuracy_middle"], best["accuracy_high"]) > 0.35, best
    assert (tmp_path / "run" / "best" / str(best["step"])).is_dir()


_THREE_WAY_LABELS = ("in order", "swapped", "échoed")  # string labels, one with a space, non-ASCII


def write_three_way_task(directory: Path, pools: dict[str, list[str]], num_train: int,
                         seed: int = 0) -> dict[str, Path]:
    """Your own data (configs/custom.py, JSON Lines): the halves of a sentence in order, swapped,
    or the first half twice; three string labels, exactly balanced (chance is 1/3)."""
    rng = random.Random(seed)
    paths = {}
    for split, count in (("train", num_train), ("dev", len(pools["dev"]))):
        lines = []
        for row in range(count):
            first, second = _halves(pools[split][row % len(pools[split])], rng)
            label = _THREE_WAY_LABELS[row % 3]
            pair = {"in order": (first, second), "swapped": (second, first),
                    "échoed": (first, first)}[label]
            lines.append(json.dumps({"first": pair[0], "second": pair[1], "label": label}))
        paths[split] = directory / f"{split}.jsonl"
        paths[split].write_text("\n".join(lines) + "\n")
    return paths


@pytest.mark.slow
def test_custom_three_class_task_from_real_text_is_well_above_chance(spm_model, sentence_pools,
                                                                  tmp_path):
    steps = 400
    paths = write_three_way_task(tmp_path, sentence_pools, num_train=steps * 32)
    best = finetune_from_scratch(
        "configs/custom.py:kind=classification,runlocal", tmp_path / "run", spm_model, steps,
        f"--config.data.train_file={paths['train']}", f"--config.data.dev_file={paths['dev']}",
        "--config.data.text_a=first", "--config.data.text_b=second",
        "--config.selection_metric=macro_f1",
        "--config.length_buckets=(32,)")  # below seq_len 48: predict's order matters (below)
    # Chance is 1/3; the echoed pairs alone (identical halves) give 1/3 + a coin flip on the
    # rest, 2/3; above that the model tells the order of the halves.
    assert best["accuracy"] > 0.75 and best["macro_f1"] > 0.7, best

    # predict runs a chunk shortest first, at its fine lengths (16, 32, 48 here), and puts the
    # predictions back in input order: the records equal those of the batches in input order at
    # the run's buckets (32, 48), and the batches run shorter.
    run = finetune_run.load_finished_run(str(tmp_path / "run"))
    examples = next(run.task.read_inputs(str(paths["dev"]), finetune_run.PREDICT_CHUNK_ROWS))

    def counting_lengths(lengths: list[int]):
        def eval_step(params, batch):
            lengths.append(batch["input_ids"].shape[-1])
            return run.eval_step(params, batch)
        return dataclasses.replace(run, eval_step=eval_step)

    sorted_lengths, input_order_lengths = [], []
    records = counting_lengths(sorted_lengths).prediction_records(examples)
    _, predictions = counting_lengths(input_order_lengths).predict(
        run.task.batches_of(run.task.input_features(examples)))
    expected = run.task.prediction_records(examples, real_rows(predictions))
    assert [record["id"] for record in records] == [str(row) for row in range(len(examples))]
    for record, expected_record in zip(records, expected, strict=True):
        assert record["id"] == expected_record["id"]
        assert record["prediction"] == expected_record["prediction"]
        assert record["probabilities"] == pytest.approx(expected_record["probabilities"],
                                                        abs=1e-5)
    assert len(sorted_lengths) == len(input_order_lengths) == -(-len(examples) // 64)
    assert set(input_order_lengths) <= {32, 48}
    assert sum(sorted_lengths) < sum(input_order_lengths), (sorted_lengths, input_order_lengths)


def test_the_demo_paraphrase_task_reads_as_mrpc(tmp_path):
    """`make demo`'s task: GLUE's MRPC reader takes it; labels balanced; a positive pair is the
    sentence less one word; dev sentences never appear in train."""
    from albert_jax.finetune.demo import write_paraphrase_task
    from albert_jax.finetune.glue import data as glue

    data_path = write_paraphrase_task(str(tmp_path), num_train=400, num_dev=100, num_test=20)
    train, _ = glue.read_train("mrpc", data_path)
    (dev_set,) = glue.read_eval_sets("mrpc", data_path, "dev")
    dev = dev_set.examples
    assert len(train) == 400 and len(dev) == 100
    for example in dev:
        first, second = example.text_a.split(), example.text_b.split()
        if example.label == "1":
            assert len(second) == len(first) - 1 and set(second) <= set(first)
    assert 0.4 < sum(example.label == "1" for example in train) / 400 < 0.6
    assert not {example.text_a for example in dev} & {example.text_a for example in train}
