"""HuggingFace `datasets` in: a save_to_disk folder or an .arrow file reads as the same examples
as the CSV it was made from, for own data of every kind and for predict; data.hf_dataset loads
its splits through datasets.load_dataset from a local cache this test builds (offline, never a
download); a missing column, split or folder is one line."""
import csv
import json
import os

import pytest

datasets = pytest.importorskip("datasets")

from albert_jax.data import tokenizers as tokenizer_lib  # noqa: E402
from albert_jax.finetune.core import tables  # noqa: E402
from albert_jax.finetune.custom import tagging_data  # noqa: E402
from albert_jax.finetune.demo import demo_sentences  # noqa: E402
from cli_fixtures import cli, one_device_environment  # noqa: E402

ROWS = [{"id": f"r{n}", "text": text, "label": ("yes", "no")[n % 2]}
        for n, text in enumerate(demo_sentences()[:24])]
COLUMNS = tables.Columns(text_a="text", label="label", id="id")


def _csv(path, rows) -> str:
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _saved(path, rows) -> str:
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return str(path)


def test_folder_and_arrow_read_as_the_csv(tmp_path):
    from_csv = tables.read_file(_csv(tmp_path / "rows.csv", ROWS), "classification", COLUMNS)
    folder = _saved(tmp_path / "rows", ROWS)
    from_folder = tables.read_file(folder, "classification", COLUMNS)
    [arrow] = [name for name in os.listdir(folder) if name.endswith(".arrow")]
    from_arrow = tables.read_file(os.path.join(folder, arrow), "classification", COLUMNS)
    strip = lambda examples: [(e.id, e.text_a, e.text_b, e.label) for e in examples]  # noqa: E731
    assert strip(from_folder) == strip(from_arrow) == strip(from_csv)
    assert from_folder[3].source == f"{folder}:4"
    # Token lists for tagging, from a folder too.
    sentences = _saved(tmp_path / "tags", [{"tokens": ["John", "runs"], "tags": ["B-PER", "O"]}])
    [[sentence]] = list(tagging_data.iter_sentence_chunks(sentences, tagging_data.TagColumns()))
    assert sentence.tokens == ("John", "runs") and sentence.tags == ("B-PER", "O")


def test_bad_folders_and_columns_are_one_line(tmp_path):
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                          "validation": datasets.Dataset.from_list(ROWS[:4])}
                         ).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(ValueError, match=r"a DatasetDict folder; name one split's folder: .*"
                                         r"dict/train, .*dict/validation"):
        tables.read_file(str(tmp_path / "dict"), "classification", COLUMNS)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="not one of `Dataset.save_to_disk`"):
        tables.read_file(str(tmp_path / "plain"), "classification", COLUMNS)
    with pytest.raises(ValueError, match=r"rows:1: no column 'review' \(config data.text_a\); "
                                         r"the file's columns are 'id', 'text', 'label'") as error:
        tables.read_file(_saved(tmp_path / "rows", ROWS), "classification",
                         tables.Columns(text_a="review", label="label"))
    assert "\n" not in str(error.value)


def _hub_cache(root) -> str:
    """A datasets cache holding `tiny_reviews` (configuration `plain`, splits train and
    validation) as load_dataset keeps a hub dataset it downloaded: built here from CSV files."""
    from datasets.packaged_modules.csv.csv import Csv  # pylint: disable=import-outside-toplevel

    cache = root / "hf_cache"
    builder = Csv(cache_dir=str(cache), dataset_name="tiny_reviews", config_name="plain",
                  hash="0", data_files={"train": _csv(root / "train.csv", ROWS),
                                        "validation": _csv(root / "dev.csv", ROWS[:8])})
    builder.download_and_prepare()
    [suffixed] = os.listdir(cache / "tiny_reviews")  # plain-<hash of the data files>
    os.rename(cache / "tiny_reviews" / suffixed, cache / "tiny_reviews" / "plain")
    return str(cache)


@pytest.mark.slow
def test_a_cached_hub_dataset_finetunes_and_a_folder_predicts(tmp_path):
    environment = dict(one_device_environment(), HF_DATASETS_CACHE=_hub_cache(tmp_path),
                       HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    spm = tokenizer_lib.train(demo_sentences(), str(tmp_path / "spm.model"), vocab_size=200)
    common = ["finetune", "--config=configs/custom.py:kind=classification,runlocal",
              f"--config.tokenizer={spm}", "--config.data.hf_dataset=tiny_reviews",
              "--config.data.hf_config=plain", "--config.data.id=id", "--config.seq_len=32",
              "--config.batch_size=8", "--config.eval_batch_size=8", "--config.total_steps=2",
              "--config.eval_every_steps=2", "--config.checkpoint_every_steps=2"]
    missing = cli(*common, "--config.data.dev_file=test", f"--workdir={tmp_path / 'bad'}",
                  environment=environment)
    assert missing.returncode != 0
    assert "tiny_reviews/plain[test]" in missing.stderr and "train" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert not (tmp_path / "bad").exists() or not os.listdir(tmp_path / "bad")
    result = cli(*common, f"--workdir={tmp_path / 'run'}", environment=environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "labels.json").read_text()) == ["no", "yes"]

    new = [{"id": row["id"], "text": row["text"]} for row in ROWS[:6]]
    outputs = {}
    for name, table in (("csv", _csv(tmp_path / "new.csv", new)),
                        ("folder", _saved(tmp_path / "new", new))):
        outputs[name] = tmp_path / f"{name}.jsonl"
        result = cli("predict", f"--workdir={tmp_path / 'run'}", f"--input={table}",
                     f"--output={outputs[name]}", environment=environment)
        assert result.returncode == 0, result.stderr[-3000:]
    assert outputs["folder"].read_text() == outputs["csv"].read_text()
    assert [json.loads(line)["id"] for line in outputs["csv"].read_text().splitlines()] == [
        row["id"] for row in new]
