"""Corpora as they are published: Parquet, JSON Lines and compressed text, HF `save_to_disk`
folders and hub-cache snapshots, read as the SPEC 1.2 text file holding the same documents;
the segmenter on records; files cut into byte ranges and row-group ranges that tile them, a
TFDS split at its shard files; bad
input skipped and counted, a missing text column one line; the same build bytes from every
format, runner and process count, and after a kill."""
import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow_datasets as tfds
import zstandard

from albert_jax.data import corpus
from albert_jax.data.building import builder, dataset_settings
from albert_jax.data.corpus import ReadSettings, parts, segmenter
from albert_jax.errors import ConfigError
from cli_fixtures import cli, run_config
from test_beam_build import build_on_the_pool_and_on_beam_after_a_kill, digests

RECORDS_OF_LINES = ReadSettings(documents="records", sentences="lines")


@pytest.fixture(scope="module")
def documents() -> list[list[str]]:
    """60 demo documents: real English sentences."""
    return [document for _, document in zip(range(60), corpus.demo_documents())]


def spec_text(documents: list[list[str]]) -> str:
    """SPEC 1.2: one sentence per line, a blank line between documents."""
    return "\n\n".join("\n".join(document) for document in documents) + "\n"


def write_parquet(path: Path, texts: list[str], row_group_size: int | None = None, **columns):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts, **columns}), path,
                   row_group_size=row_group_size, write_page_checksum=True)
    return str(path)


def jsonl(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": text, "url": f"https://example.org/{index}"}) + "\n"
                   for index, text in enumerate(texts)).encode()


def write_hub_snapshot(cache: Path, texts: list[str]) -> str:
    """A hub dataset `owner/wiki` in an HF cache layout (refs/main -> snapshot), config
    `20231101.xx`: a train and a test Parquet file. Its corpus spec."""
    repo = cache / "datasets--owner--wiki"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    snapshot = repo / "snapshots" / "0123abcd" / "20231101.xx"
    write_parquet(snapshot / "train-00000-of-00001.parquet", texts)
    write_parquet(snapshot / "test-00000-of-00001.parquet", ["Not. Read."])
    write_parquet(repo / "snapshots" / "0123abcd" / "20231101.yy" / "train-0.parquet", ["No."])
    return "hf:owner/wiki/20231101.xx:train"


def write_every_format(root: Path, documents: list[list[str]], monkeypatch) -> dict[str, str]:
    """The documents as a SPEC 1.2 text file and in every other format (records: each
    document's sentences one a line); {format: corpus spec}."""
    text = spec_text(documents)
    records = ["\n".join(document) for document in documents]
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text(text)
    (root / "corpus.txt.xz").write_bytes(lzma.compress(text.encode()))
    (root / "corpus.txt.bz2").write_bytes(bz2.compress(text.encode()))
    (root / "corpus.jsonl.gz").write_bytes(gzip.compress(jsonl(records)))
    (root / "corpus.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(records)))
    (root / "corpus.json").write_bytes(jsonl(records))
    write_parquet(root / "corpus.parquet", records)
    datasets.Dataset.from_dict({"text": records}).save_to_disk(str(root / "saved"))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hub"))
    return {"text": str(root / "corpus.txt"), "xz": str(root / "corpus.txt.xz"),
            "bz2": str(root / "corpus.txt.bz2"), "jsonl.gz": str(root / "corpus.jsonl.gz"),
            "jsonl.zst": str(root / "corpus.jsonl.zst"), "json": str(root / "corpus.json"),
            "parquet": str(root / "corpus.parquet"), "save_to_disk": str(root / "saved"),
            "hf": write_hub_snapshot(root / "hub", records)}


def settings_of(format_name: str) -> ReadSettings:
    """Records of one sentence a line for the record formats; a text file's own defaults."""
    return ReadSettings() if format_name in ("text", "xz", "bz2") else RECORDS_OF_LINES


def test_every_format_reads_as_the_text_file(documents, tmp_path, monkeypatch):
    specs = write_every_format(tmp_path, documents, monkeypatch)
    assert list(corpus.iter_documents(specs["text"])) == documents
    for name, spec in specs.items():
        stats = corpus.CorpusStats()
        assert list(corpus.iter_documents(spec, settings_of(name), stats)) == documents, name
        assert (stats.documents, stats.first_problem) == (len(documents), ""), name
    # The hub snapshot's train split of its config, not the test split or another config.
    assert corpus.list_sources(specs["hf"]) == [str(
        tmp_path / "hub/datasets--owner--wiki/snapshots/0123abcd/20231101.xx/"
                   "train-00000-of-00001.parquet")]
    with pytest.raises(ConfigError, match=r"hf:owner/other'.*not in the HuggingFace cache.*"
                                          r"huggingface-cli download --repo-type=dataset"):
        corpus.list_sources("hf:owner/other")


def test_records_are_cut_by_the_segmenter_in_their_language(tmp_path):
    english = "Dr. Smith paid 3.5 dollars. he left at noon!\nA second paragraph? Yes."
    path = write_parquet(tmp_path / "wiki.parquet",
                         [english, "我来了。你好吗？很好。", english],
                         language=["en", "zh", "not a code"])
    expected_english = [sentence for paragraph in english.split("\n")
                        for sentence in segmenter.split_sentences(paragraph, "en")]
    assert expected_english == ["Dr. Smith paid 3.5 dollars.", "he left at noon!",
                                "A second paragraph?", "Yes."]
    # Records and the segmenter are Parquet's defaults.
    assert list(corpus.iter_documents(path))[0] == expected_english
    stats = corpus.CorpusStats()
    by_record = list(corpus.iter_documents(path, ReadSettings(language_column="language"), stats))
    assert by_record == [expected_english, ["我来了。", "你好吗？", "很好。"], expected_english]
    assert stats.unknown_languages == 1 and "language 'not a code'" in stats.first_problem
    # A text file of paragraphs (CC-100): blank_lines documents, segmenter sentences.
    cc100 = tmp_path / "sw.txt"
    cc100.write_text(f"{english}\n\nOne more. two more.\n")
    assert list(corpus.iter_documents(str(cc100), ReadSettings(sentences="segmenter"))) == [
        expected_english, ["One more.", "two more."]]


@pytest.mark.parametrize("key, value, message", [
    ("documents", "paragraphs", "config.data.documents='paragraphs': give one of"),
    ("sentences", "nltk", "config.data.sentences='nltk': give one of"),
    ("language", "english", "data.language='english' is not an ISO 639 language code"),
    ("text_column", "", "config.data.text_column is empty"),
])
def test_reading_keys_are_checked_in_one_line(key, value, message):
    with pytest.raises(ConfigError) as error:
        ReadSettings.from_config({key: value})
    assert message in str(error.value) and "\n" not in str(error.value)


# Documents that make the cut points interesting: runs of blank lines, whitespace-only lines,
# one-sentence documents, a long document.
_TRICKY_TEXT = ("One.\nTwo two.\n\nThree.\n\n\n \t\nFour four four.\nFive.\nSix six.\n\n"
                "Seven.\n\n\nEight eight eight eight eight.\nNine.\n\nTen.\n")


@pytest.mark.parametrize("file_name, content, settings", [
    ("a.txt", _TRICKY_TEXT, ReadSettings()),
    ("a.txt", _TRICKY_TEXT, ReadSettings(documents="records")),
    ("a.jsonl", jsonl(_TRICKY_TEXT.split("\n\n")).decode(), RECORDS_OF_LINES),
])
def test_byte_ranges_tile_the_file(tmp_path, file_name, content, settings):
    path = tmp_path / file_name
    path.write_text(content)
    whole = list(corpus.read_documents(str(path), settings))
    assert len(whole) >= 6
    for unit_bytes in (1, 2, 3, 5, 8, 13, 21, 34, 55):
        planned = parts.plan_parts([(str(path), path.stat().st_size)], settings, unit_bytes)
        assert len(planned) == -(-path.stat().st_size // unit_bytes)
        assert sum(size for _, size in planned) == path.stat().st_size
        pieces = [document for part, _ in planned
                  for document in corpus.read_documents(part, settings)]
        assert pieces == whole, unit_bytes  # no document lost, doubled or cut


def test_parquet_row_group_ranges_tile_the_file(documents, tmp_path):
    path = write_parquet(tmp_path / "a.parquet", ["\n".join(d) for d in documents],
                         row_group_size=6)  # 10 row groups
    size = os.path.getsize(path)
    planned = parts.plan_parts([(path, size)], RECORDS_OF_LINES, size // 4)
    ranges = [parts.parse(part)[2] for part, _ in planned]
    assert len(ranges) >= 3 and ranges[0][0] == 0 and ranges[-1][1] == 10
    assert all(stop == start for (_, stop), (start, _) in zip(ranges, ranges[1:]))
    assert all(part_size >= size // 4 for _, part_size in planned[:-1])
    assert [document for part, _ in planned
            for document in corpus.read_documents(part, RECORDS_OF_LINES)] == documents
    # Small files, compressed streams and Arrow files are whole.
    assert parts.plan_parts([(path, size)], RECORDS_OF_LINES, size) == [(path, size)]
    gz = tmp_path / "a.txt.gz"
    gz.write_bytes(gzip.compress(b"A.\n" * 1000))
    assert parts.plan_parts([(str(gz), 50)], ReadSettings(), 10) == [(str(gz), 50)]


def test_a_missing_text_column_is_one_line_naming_file_and_column(tmp_path, demo_pretraining_data):
    parquet = write_parquet(tmp_path / "oscar" / "a.parquet", ["Hello there."])
    (tmp_path / "oscar" / "b.jsonl").write_bytes(jsonl(["Hello there."]))
    for path in (parquet, str(tmp_path / "oscar" / "b.jsonl")):
        with pytest.raises(ConfigError) as error:
            list(corpus.iter_documents(path, ReadSettings(text_column="content")))
        assert f"{path} has no column 'content' (config.data.text_column)" in str(error.value)
        assert "\n" not in str(error.value)
    config = run_config({**demo_pretraining_data, "data.corpus": str(tmp_path / "oscar"),
                         "data.text_column": "content", "data.dir": str(tmp_path / "data")})
    with pytest.raises(ConfigError, match=r"has no column 'content'"):
        builder.build_from_config(config, num_processes=1)
    assert not (tmp_path / "data").exists()  # nothing written


def test_bad_records_are_skipped_counted_and_the_first_named(tmp_path):
    lines = [json.dumps({"text": "Good one.\nGood two."}).encode(), b'{"text": "cut',
             json.dumps({"text": None}).encode(), json.dumps({"text": 5}).encode(),
             json.dumps({"url": "no text"}).encode(), b"[1, 2]",
             b'{"text": "Bad \xff byte."}', json.dumps({"text": "Last."}).encode()]
    path = tmp_path / "c4.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    stats = corpus.CorpusStats()
    assert list(corpus.read_documents(str(path), RECORDS_OF_LINES, stats)) == [
        ["Good one.", "Good two."], ["Bad \ufffd byte."], ["Last."]]
    assert (stats.malformed_json_lines, stats.non_text_records, stats.invalid_utf8_lines) == (
        2, 3, 1)
    assert stats.first_problem == f"{path} line 2: malformed json line"
    assert "2 malformed json lines, 3 non text records" in stats.report()


@pytest.mark.parametrize("suffix, compress", [
    (".jsonl.zst", zstandard.ZstdCompressor().compress), (".txt.xz", lzma.compress)])
def test_a_truncated_compressed_file_gives_what_it_holds(tmp_path, suffix, compress):
    records = [f"Record number {index}." for index in range(20000)]
    content = jsonl(records) if suffix.startswith(".jsonl") else spec_text([[r] for r in records]
                                                                            ).encode()
    data = compress(content)
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(data[:len(data) // 2])
    stats = corpus.CorpusStats()
    read = [document for document in corpus.read_documents(str(path), RECORDS_OF_LINES
                                                            if suffix.startswith(".jsonl")
                                                            else ReadSettings(), stats)]
    assert 0 < len(read) < len(records) and read == [[r] for r in records[:len(read)]]
    assert stats.truncated_files == 1 and stats.first_problem.startswith(f"{path} line ")


def test_an_unreadable_row_group_is_skipped_and_named(tmp_path):
    texts = [f"Row {index} here." for index in range(300)]
    path = write_parquet(tmp_path / "a.parquet", texts, row_group_size=100)
    column = pq.ParquetFile(path).metadata.row_group(1).column(1)  # row group 1's text
    data = bytearray(Path(path).read_bytes())
    middle = (column.dictionary_page_offset or column.data_page_offset) + \
        column.total_compressed_size // 2
    data[middle:middle + 8] = bytes(byte ^ 0xFF for byte in data[middle:middle + 8])
    Path(path).write_bytes(bytes(data))
    stats = corpus.CorpusStats()
    read = list(corpus.read_documents(path, RECORDS_OF_LINES, stats))
    assert read == [[text] for text in texts[:100] + texts[200:]]
    assert stats.unreadable_row_groups == 1
    assert stats.first_problem.startswith(f"{path} row group 1 (")


def test_tokenizer_samples_records_without_reading_the_rest(documents, tmp_path):
    folder = tmp_path / "wiki"
    for index in range(6):
        write_parquet(folder / f"part{index}.parquet",
                      [" ".join(d) for d in documents[index * 10:(index + 1) * 10]])
    sources = corpus.list_sources(str(folder))
    stats = corpus.CorpusStats()
    sample = list(corpus.sample_sentences(sources, 30, 3, stats, ReadSettings()))
    assert len(sample) == 30 and stats.sources < 6  # not every file opened
    every = {s for d in corpus.iter_documents(str(folder), ReadSettings()) for s in d}
    assert set(sample) <= every  # the segmenter's sentences, as the build cuts them


def test_data_inspect_prints_documents_as_spec_text(documents, tmp_path):
    path = write_parquet(tmp_path / "a.parquet", ["\n".join(d) for d in documents])
    result = cli("data", "inspect", "--config=configs/pretrain.py:runlocal",
                 f"--config.data.corpus={path}", "--config.data.sentences=lines",
                 "--documents=3")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == spec_text(documents[:3])


def _shards(folder: str) -> dict[str, str]:
    return {name: digest for name, digest in digests(folder).items() if ".array_record-" in name}


def _build(settings: dict, **overrides) -> str:
    config = run_config({**settings, **overrides})
    builder.build_from_config(config, num_processes=1)
    return dataset_settings.dataset_dir(config)


@pytest.mark.slow
def test_every_format_builds_the_bytes_of_the_text_file(documents, tmp_path, monkeypatch,
                                                       demo_pretraining_data):
    specs = write_every_format(tmp_path / "corpus", documents, monkeypatch)
    settings = {**demo_pretraining_data, "data.dupe_factor": 1, "data.eval_fraction": 0.0,
                "data.dir": str(tmp_path / "data")}
    expected = _shards(_build(settings, **{"data.corpus": specs.pop("text")}))
    assert expected
    for name, spec in specs.items():
        reading = settings_of(name)
        built = _build(settings, **{"data.corpus": spec, "data.documents": reading.documents,
                                    "data.sentences": reading.sentences})
        assert _shards(built) == expected, name


@pytest.mark.slow
def test_cut_files_build_the_same_bytes_on_every_runner_and_after_a_kill(
        documents, tmp_path, demo_pretraining_data):
    # A text file cut into 4 byte ranges and a Parquet file into row-group ranges.
    folder = tmp_path / "corpus"
    folder.mkdir()
    text = spec_text(documents)
    (folder / "big.txt").write_text(text)
    unit_bytes = len(text.encode()) // 4 + 1
    parquet = write_parquet(folder / "rows.parquet", [" ".join(d) for d in documents],
                            row_group_size=8)
    assert 3 <= os.path.getsize(parquet) // unit_bytes
    settings = {**demo_pretraining_data, "data.corpus": str(folder), "data.dupe_factor": 1,
                "data.unit_bytes": unit_bytes}
    planned = corpus.plan_parts(corpus.sized_sources(str(folder)), ReadSettings(), unit_bytes)
    num_units = len(builder.make_units(planned, unit_bytes))
    assert sum("#bytes=" in part for part, _ in planned) == 4 and num_units >= 7
    one = _build(settings, **{"data.dir": str(tmp_path / "one")})
    expected = digests(one)
    metadata = json.loads(Path(one, "metadata.json").read_text())
    assert sum(split["documents"] for split in metadata["splits"].values()) == 2 * len(documents)
    # A TFDS split (this build, read as a TFDS dataset) is cut at its shard files (TFDS reads
    # TFDS_DATA_DIR once a process).
    name = f"albert_pretraining/{Path(one).parent.name}"
    planned_tfds = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom albert_jax.data.corpus import tfds_source\n"
         "print(tfds_source.shard_parts(sys.argv[1]))", f"tfds:{name}:train"],
        env={**os.environ, "TFDS_DATA_DIR": str(tmp_path / "one")}, capture_output=True,
        text=True, check=True).stdout.strip().splitlines()[-1]
    shard_lengths = tfds.builder_from_directory(one).info.splits["train"].shard_lengths
    assert len(shard_lengths) == num_units and planned_tfds == repr([
        f"tfds:{name}:train[{start}:{start + length}]"
        for start, length in zip(np.cumsum([0] + shard_lengths[:-1]), shard_lengths)])
    pooled, beam, _ = build_on_the_pool_and_on_beam_after_a_kill(settings, tmp_path, num_units)
    assert pooled == expected and beam == expected
