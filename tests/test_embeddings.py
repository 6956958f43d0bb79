"""`albert-jax predict --embeddings=cls|mean`: one vector per row, in input order, equal to
HuggingFace's feature-extraction pipeline on the run's HuggingFace export (mean: averaged over
the attention mask; cls: its first position) within 1e-4, as JSON Lines and as .npy."""
import csv
import dataclasses
import json

import ml_collections
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from albert_jax import cli  # noqa: E402
from albert_jax.convert import formats  # noqa: E402
from albert_jax.finetune import fill_mask  # noqa: E402
from albert_jax.finetune import run as finetune_run  # noqa: E402
from albert_jax.finetune.core.task import real_rows  # noqa: E402
from albert_jax.model import get_config  # noqa: E402
from albert_jax.train import buckets  # noqa: E402

# No commas or digits: the demo tokenizer's comma rule (SPEC 2.3) then cuts HF's pieces.
TEXTS = ("the cat sat on the mat", "a man walked his dog along the river to the city and back "
         "again before the long train left the station", "birds sing", "the house by the road")


@pytest.fixture(scope="module")
def hf_features(pretrained_tiny, tmp_path_factory):
    """HF's feature-extraction pipeline on the tiny run's HuggingFace export: [seq, hidden]
    per text."""
    folder = tmp_path_factory.mktemp("hf") / "export"
    formats.convert(source="orbax", target="huggingface", path=str(pretrained_tiny / "checkpoints"),
                    output=str(folder), config_path=None)
    tokenizer = transformers.AlbertTokenizer(str(pretrained_tiny / "spiece.model"))
    extract = transformers.pipeline("feature-extraction", model=str(folder), tokenizer=tokenizer,
                                    framework="pt", device=-1)
    return [np.asarray(extract(text))[0] for text in TEXTS]


def _table(path, with_ids: bool) -> str:
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["id", "text"] if with_ids else ["text"])
        for number, text in enumerate(TEXTS):
            writer.writerow([f"t{number}", text] if with_ids else [text])
    return str(path)


@pytest.mark.slow
def test_mean_and_cls_equal_huggingface_feature_extraction(pretrained_tiny, hf_features,
                                                           tmp_path):
    table = _table(tmp_path / "texts.csv", with_ids=True)
    output = finetune_run.predict(str(pretrained_tiny), table, str(tmp_path / "mean.jsonl"),
                                  embeddings="mean")
    records = [json.loads(line) for line in open(output, encoding="utf-8")]
    assert [record["id"] for record in records] == ["t0", "t1", "t2", "t3"]
    for record, features in zip(records, hf_features):
        np.testing.assert_allclose(record["embedding"], features.mean(axis=0), atol=1e-4, rtol=0)

    output = finetune_run.predict(str(pretrained_tiny), _table(tmp_path / "plain.csv", False),
                                  str(tmp_path / "cls.npy"), embeddings="cls")
    vectors = np.load(output)
    assert vectors.dtype == np.float32 and vectors.shape == (len(TEXTS), hf_features[0].shape[1])
    np.testing.assert_allclose(vectors, np.stack([features[0] for features in hf_features]),
                               atol=1e-4, rtol=0)


def test_bad_pooling_and_missing_column_are_one_line_and_write_nothing(pretrained_tiny,
                                                                       tmp_path):
    table = _table(tmp_path / "texts.csv", with_ids=True)
    with pytest.raises(ValueError, match="--embeddings='max': choose one of cls, mean"):
        finetune_run.predict(str(pretrained_tiny), table, str(tmp_path / "out.jsonl"),
                             embeddings="max")
    (tmp_path / "other.csv").write_text("sentence\nthe cat\n")
    with pytest.raises(ValueError, match="text"):
        finetune_run.predict(str(pretrained_tiny), str(tmp_path / "other.csv"),
                             str(tmp_path / "out.jsonl"), embeddings="mean")
    assert not list(tmp_path.glob("out*"))
    cli.check_command_line(["albert-jax", "predict", "--workdir=W", "--input=F",
                            "--embeddings=mean", "--output=O.npy"])


def test_predict_runs_sorted_rows_at_its_own_lengths(pretrained_tiny, tmp_path):
    """predict runs a chunk's rows shortest first, each batch cut to predict's lengths (16, 32,
    48, 64 at the tiny run's seq_len 64), and puts the vectors back in input order: the same as
    the rows in input order padded to seq_len."""
    words = " ".join(TEXTS).split()
    texts = [" ".join(words[:count]) for count in (40, 2, 12, 30, 5, 22, 3, 9, 16, 7, 50, 4)]
    table = tmp_path / "texts.csv"
    with open(table, "w", encoding="utf-8", newline="") as file:
        csv.writer(file).writerows([["id", "text"], *([f"t{n}", t] for n, t in enumerate(texts))])
    run = finetune_run.with_embeddings(finetune_run.load_finished_run(str(pretrained_tiny)),
                                       "mean")
    examples = next(run.task.read_inputs(str(table), finetune_run.PREDICT_CHUNK_ROWS))
    lengths_run = []

    def eval_step(params, batch):
        lengths_run.append(batch["input_ids"].shape[-1])
        return run.eval_step(params, batch)

    records = dataclasses.replace(run, eval_step=eval_step).prediction_records(examples)
    _, padded = run.predict(run.task.batches_of(run.task.input_features(examples)), (64,))
    expected = run.task.prediction_records(examples, real_rows(padded))
    assert [record["id"] for record in records] == [f"t{n}" for n in range(len(texts))]
    np.testing.assert_allclose([record["embedding"] for record in records],
                               [record["embedding"] for record in expected], atol=1e-5, rtol=0)
    # Batches of 8 (the run's eval_batch_size): the 8 shortest rows, then the 4 longest (and 4
    # padding rows), each at the multiple of 16 that holds its longest row.
    tokens = sorted(run.task.input_features(examples)["input_mask"].sum(axis=-1))
    assert lengths_run == [-(-tokens[7] // 16) * 16, -(-tokens[11] // 16) * 16]
    assert lengths_run[0] < 64


def test_a_pretraining_run_predicts_at_length_buckets(pretrained_tiny):
    """Fill-mask (and embeddings, which read its task's config) cut batches to the fine-tuning
    length buckets below the run's seq_len, not always seq_len."""
    config = ml_collections.ConfigDict(json.loads((pretrained_tiny / "config.json").read_text()))
    config.seq_len = 512  # as a base-sized run's; the tiny run's own is 64, its only bucket
    task = fill_mask.FillMaskTask.from_run(config, pretrained_tiny, get_config("tiny"))
    assert buckets.lengths_of(task.config) == (32, 64, 96, 128, 192, 256, 384, 512)
    assert task.sequence_fields == ("input_ids", "segment_ids", "input_mask")
    assert "length_buckets" not in config  # the saved config is left as it was
