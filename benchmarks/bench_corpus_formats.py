"""Corpora as published against SPEC 1.2 text: the build's speed from Parquet records with the
segmenter, and the peak RSS of reading Parquet corpora from 100 MB to 1 GB.

  python benchmarks/bench_corpus_formats.py speed [--megabytes=16] [--repeats=3]
      [--vocab_size=8000] [--seq_len=512] [--dupe_factor=5] [--unit_mb=16] [--workdir=DIR]
  python benchmarks/bench_corpus_formats.py memory [--sizes_mb=100,1000] [--workdir=DIR]

The text, all seeds fixed: the documents of benchmarks/bench_data_build.py's sources (text already
on a Debian/Ubuntu machine that our tests never made: /usr/share/doc copyrights, licenses, the
gzipped READMEs and changelogs), each paragraph (lines between blank lines) made one line (its
whitespace folded), a file cut into documents at a paragraph end past 8,000 characters.

speed: the same documents written twice, in files of about 1 MB with the same documents each:
  text     SPEC 1.2: each paragraph cut into sentences by `segmenter.split_sentences(p, "en")`,
           one per line, a blank line between documents (data.documents/sentences: the text
           defaults, blank_lines + lines);
  parquet  one row per document, `text` its paragraphs joined by newlines, one row group per
           file (the Parquet defaults, records + segmenter, data.language "en");
  so both builds read the same sentences. Each is built as `albert-jax data build` builds on one
  core (`builder.build_from_config(config, num_processes=1)` in a fresh process, as
  bench_data_build.py's `ours` row: CPU s = user + sys of the process tree), the two formats
  interleaved in each of --repeats rounds, medians; then, in this process, interleaved, medians:
  MB per CPU-second of reading each format (`corpus.iter_documents`; Parquet also with
  data.sentences=lines, its reader without the segmenter) and of the segmenter alone on the same
  paragraphs. MB are the UTF-8 bytes of the text (the `text` column, the text files).
memory: for each size, one Parquet file of that many MB (snappy, row groups of about 10 MB of
  text: 1,000 documents) made of the documents above, repeated; then, in a fresh process, the
  build's reading path: the units `plan_parts` makes of it (data.unit_bytes 32 MiB: ranges of row
  groups) read one after another with `read_documents` (records + segmenter), every sentence
  counted. Peak RSS of that process before reading (imports, the plan) and while reading
  (VmHWM, reset in between). The files are deleted afterwards.
"""
from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import re
import shutil
import statistics
import sys
import time
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # albert_jax/
from bench_data_build import (  # noqa: E402  (this script's folder is on sys.path)
    DOCUMENT_CHARACTERS,
    FILE_BYTES,
    SEED,
    _become_subreaper,
    _builder_code,
    _our_build,
    _rss_reporting,
    _text_sources,
    measured,
    source_paragraphs,
)

from albert_jax.data import corpus, segmenter, tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LANGUAGE = "en"
ROW_GROUP_DOCUMENTS = 1000  # about 10 MB of text per row group
UNIT_BYTES = 32 << 20


# ---------------------------------------------------------------------------------------------
# The documents: lists of paragraphs.

def _file_documents(path: str) -> list[list[str]]:
    """One source file's documents, each a list of paragraphs (one line each)."""
    documents, document, characters = [], [], 0
    for block in source_paragraphs(path):
        paragraph = " ".join(block.split())
        if not paragraph:
            continue
        document.append(paragraph)
        characters += len(paragraph)
        if characters >= DOCUMENT_CHARACTERS:
            documents.append(document)
            document, characters = [], 0
    if document:
        documents.append(document)
    return documents


def paragraph_documents() -> Iterator[list[str]]:
    """Every document of the sources, in order (see the module docstring)."""
    for path in _text_sources():
        yield from _file_documents(path)


def _text_file_bytes(document: list[str]) -> str:
    sentences = [s for p in document for s in segmenter.split_sentences(p, LANGUAGE)]
    return "".join(f"{sentence}\n" for sentence in sentences) + "\n"


def write_corpora(directory: str, megabytes: float) -> tuple[str, str]:
    """About `megabytes` of documents as SPEC 1.2 text files and as Parquet files with the same
    documents each; returns their globs."""
    text_glob = os.path.join(directory, "text", "part*.txt")
    parquet_glob = os.path.join(directory, "parquet", "part*.parquet")
    if os.path.exists(os.path.join(directory, "DONE")):
        return text_glob, parquet_glob
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(os.path.join(directory, "text"))
    os.makedirs(os.path.join(directory, "parquet"))
    written, index, text_part, record_part = 0, 0, "", []
    documents = paragraph_documents()
    while written < megabytes * 1e6:
        document = next(documents, None)
        if document is None:
            sys.exit(f"only {written / 1e6:.1f} MB of text under /usr/share/doc; ask for less")
        text = _text_file_bytes(document)
        if text == "\n":  # no sentence: neither format would have the document
            continue
        text_part += text
        record_part.append("\n".join(document))
        written += len(text.encode())
        if len(text_part.encode()) >= FILE_BYTES or written >= megabytes * 1e6:
            name = f"part{index:03d}"
            with open(os.path.join(directory, "text", f"{name}.txt"), "w") as file:
                file.write(text_part)
            pq.write_table(pa.table({"text": record_part}),
                           os.path.join(directory, "parquet", f"{name}.parquet"))
            index, text_part, record_part = index + 1, "", []
    open(os.path.join(directory, "DONE"), "w").close()
    return text_glob, parquet_glob


# ---------------------------------------------------------------------------------------------
# speed

def _files(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern))


def _read_megabytes_per_cpu_s(read: Callable[[], None], megabytes: float) -> float:
    start = time.process_time()
    read()
    return megabytes / (time.process_time() - start)


def _consume(corpus_glob: str, settings: corpus.ReadSettings) -> None:
    for _ in corpus.iter_documents(corpus_glob, settings):
        pass


def _segment_all(paragraphs: list[str]) -> None:
    for paragraph in paragraphs:
        segmenter.split_sentences(paragraph, LANGUAGE)


def speed(arguments) -> None:
    _become_subreaper()
    directory = os.path.join(arguments.workdir, f"corpus_{arguments.megabytes:g}mb")
    text_glob, parquet_glob = write_corpora(directory, arguments.megabytes)
    model = os.path.join(arguments.workdir, f"spm{arguments.vocab_size}.model")
    if not os.path.exists(model):
        tokenizer.train((s for d in corpus.iter_documents(text_glob) for s in d), model,
                        arguments.vocab_size, seed=SEED)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    globs = {"text": text_glob, "parquet": parquet_glob}
    builds = collections.defaultdict(list)
    for _ in range(arguments.repeats):
        for name, corpus_glob in globs.items():
            result = _our_build(name, _builder_code, arguments, corpus_glob, model,
                                arguments.workdir, env)
            result.pop("output")
            builds[name].append(result)
            print(f"{name}: {json.dumps(result)}", flush=True)

    paragraphs = [line for table in map(pq.read_table, sorted(_files(parquet_glob)))
                  for text in table.column("text").to_pylist() for line in text.split("\n")]
    text_megabytes = sum(os.path.getsize(path) for path in _files(text_glob)) / 1e6
    record_megabytes = sum(len(p.encode()) + 1 for p in paragraphs) / 1e6
    readers = {
        "text (SPEC 1.2: blank_lines + lines)": functools.partial(
            _consume, text_glob, corpus.ReadSettings()),
        "Parquet reader alone (records + lines)": functools.partial(
            _consume, parquet_glob, corpus.ReadSettings(sentences="lines")),
        "Parquet with the segmenter (records + segmenter)": functools.partial(
            _consume, parquet_glob, corpus.ReadSettings()),
        "segmenter alone (split_sentences of each paragraph)": functools.partial(
            _segment_all, paragraphs),
    }
    speeds = collections.defaultdict(list)
    for _ in range(arguments.repeats):
        for name, read in readers.items():
            megabytes = text_megabytes if name.startswith("text") else record_megabytes
            speeds[name].append(_read_megabytes_per_cpu_s(read, megabytes))

    print(f"\n{arguments.megabytes:g} MB of documents, seq_len {arguments.seq_len}, dupe_factor "
          f"{arguments.dupe_factor}, SentencePiece {arguments.vocab_size} pieces, data.unit_bytes "
          f"{arguments.unit_mb:g} MiB; medians of {arguments.repeats} interleaved runs")
    print("| corpus | files MB | instances | CPU s | instances / CPU-s | x text |")
    print("|---|---:|---:|---:|---:|---:|")
    rates = {}
    for name, results in builds.items():
        cpu_s = statistics.median(result["cpu_s"] for result in results)
        rates[name] = results[0]["instances"] / cpu_s
        files_mb = sum(os.path.getsize(path) for path in _files(globs[name])) / 1e6
        print(f"| {name} | {files_mb:.1f} | {results[0]['instances']:,} | {cpu_s:.1f} | "
              f"{rates[name]:,.0f} | {rates[name] / rates['text']:.2f}x |")
    print("\n| reading | text MB | MB / CPU-s |")
    print("|---|---:|---:|")
    for name, values in speeds.items():
        megabytes = text_megabytes if name.startswith("text") else record_megabytes
        print(f"| {name} | {megabytes:.1f} | {statistics.median(values):.1f} |")


# ---------------------------------------------------------------------------------------------
# memory

def write_parquet(path: str, megabytes: float) -> tuple[int, int]:
    """One Parquet file of about `megabytes` MB (the documents, repeated); returns its bytes and
    the bytes of its text."""
    records = ["\n".join(document) for document in paragraph_documents()]
    text_bytes, index = 0, 0
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        while os.path.getsize(path) < megabytes * 1e6:
            group = [records[(index + i) % len(records)] for i in range(ROW_GROUP_DOCUMENTS)]
            index += ROW_GROUP_DOCUMENTS
            writer.write_table(pa.table({"text": group}))
            text_bytes += sum(len(text.encode()) for text in group)
    return os.path.getsize(path), text_bytes


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(f"{key}:")))


def read_units(path: str) -> None:
    """The build's reading path over `path` in this process: its units read one after another;
    prints the peak RSS before reading (imports, the plan) and while reading (the peak reset in
    between: /proc/self/clear_refs), in KB. (Not getrusage's ru_maxrss: Linux keeps it across
    fork and exec, so a child's starts at its parent's RSS.)"""
    settings = corpus.ReadSettings()
    parts = corpus.plan_parts(corpus.sized_sources(path), settings, UNIT_BYTES)
    before = _status_kb("VmHWM")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # VmHWM := VmRSS
    stats = corpus.CorpusStats()
    sentences = sum(len(document) for part, _ in parts
                    for document in corpus.read_documents(part, settings, stats))
    print("UNITS", len(parts), "DOCUMENTS", stats.documents, "SENTENCES", sentences,
          "BEFORE_KB", before, "PEAK_KB", _status_kb("VmHWM"))


def memory(arguments) -> None:
    _become_subreaper()
    os.makedirs(arguments.workdir, exist_ok=True)
    rows = []
    for megabytes in map(float, arguments.sizes_mb.split(",")):
        path = os.path.join(arguments.workdir, f"corpus_{megabytes:g}mb.parquet")
        try:
            file_bytes, text_bytes = write_parquet(path, megabytes)
            code = (f"import sys\nsys.path.insert(0, {HERE!r})\nimport bench_corpus_formats\n"
                    f"bench_corpus_formats.read_units({path!r})")
            result = measured(_rss_reporting(code),
                              os.path.join(arguments.workdir, f"memory_{megabytes:g}.log"),
                              dict(os.environ))
        finally:
            if os.path.exists(path):
                os.remove(path)
        found = re.search(
            r"UNITS (\d+) DOCUMENTS (\d+) SENTENCES (\d+) BEFORE_KB (\d+) PEAK_KB (\d+)",
            result["output"])
        if found is None:
            sys.exit(f"no counts in the reading's output:\n{result['output'][-4000:]}")
        units, documents, sentences, before_kb, peak_kb = map(int, found.groups())
        result.pop("output")
        result.update(before_mb=before_kb / 1024, reading_peak_mb=peak_kb / 1024)
        rows.append((file_bytes, text_bytes, units, documents, sentences, result))
        print(f"{megabytes:g} MB: {units} units, {json.dumps(result)}", flush=True)
    print("\n| Parquet MB | text MB | units | documents | sentences | CPU s | peak RSS before "
          "reading MB | peak RSS while reading MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for file_bytes, text_bytes, units, documents, sentences, result in rows:
        print(f"| {file_bytes / 1e6:,.0f} | {text_bytes / 1e6:,.0f} | {units} | {documents:,} | "
              f"{sentences:,} | {result['cpu_s']:.0f} | {result['before_mb']:.0f} | "
              f"{result['reading_peak_mb']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("speed", "memory"))
    parser.add_argument("--megabytes", type=float, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--unit_mb", type=float, default=16.0,
                        help="data.unit_bytes in MiB; at least --megabytes: one unit from each "
                             "format, so both builds draw the same instances")
    parser.add_argument("--sizes_mb", default="100,1000")
    parser.add_argument("--workdir", default="/tmp/bench_corpus_formats")
    arguments = parser.parse_args()
    if arguments.what == "speed":
        speed(arguments)
    else:
        memory(arguments)


if __name__ == "__main__":
    main()
