"""Instances per CPU-second of a whole data build: google-research/albert's
create_pretraining_data.py (the reference) against `albert-jax data build`.

  python benchmarks/bench_data_build.py --reference_dir=DIR [--sizes_mb=16,48] [--workdir=DIR]
      [--systems=reference,ours,beam] [--reference_sizes_mb=16] [--unit_mb=4]
      [--vocab_size=8000] [--seq_len=512] [--dupe_factor=5]

--reference_dir: a checkout of https://github.com/google-research/albert (its
create_pretraining_data.py and tokenization.py are copied into a package `albert` and run as
they are, with `benchmarks/reference_standin/` first on their path: a stand-in `tensorflow`
that provides the TF 1.x flags, gfile, logging, tf.train.Example protos and a TFRecord writer
they use, so no TensorFlow is needed).

What it does, all seeds fixed:
1. Makes a corpus of each size from text already on a Debian/Ubuntu machine that our tests never
   made: /usr/share/doc/*/copyright, /usr/share/common-licenses/*, then the gzipped docs under
   /usr/share/doc (READMEs, NEWS, changelogs), in that (sorted) order; one sentence per line
   (`segmenter.split_sentences` of each paragraph, English; a "sentence" of over 1,000
   characters, e.g. a table, cut at spaces), a blank line between documents (SPEC 1.2; a file
   is one document, cut at a paragraph end past 8,000 characters or anywhere past 16,000), over
   1 MB files. The
   smaller corpus is a prefix of the larger.
2. Trains one SentencePiece model of --vocab_size pieces on the smallest corpus with our
   tokenizer code (`tokenizers.train`, SPEC 2.1).
3. Builds each corpus with each system in a fresh process, seq --seq_len, --dupe_factor passes,
   masked_lm_prob 0.15, 20 predictions, 3-grams, short_seq_prob 0.1, SOP; ours with
   data.eval_fraction 0 (one split, like the reference) and data.unit_bytes --unit_mb MiB (the
   same config, so the same shards, for both of our rows); the reference at
   --reference_sizes_mb only (it holds the whole corpus x dupe_factor in memory):
     reference  `python -m albert.create_pretraining_data` (random_seed 12345), one TFRecord file;
     ours       `builder.build_from_config(config, num_processes=1)`, what `albert-jax data build`
                runs, in one process (no pool);
     beam       `albert-jax data build --beam_pipeline_options=runner=FnApiRunner,
                direct_running_mode=multi_processing,direct_num_workers=2` (where the CLI has it).
   This process makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every process
   a build starts, reaped by it or orphaned, is waited for here: "CPU s" is user + sys of all of
   them (getrusage of the children). The command's process reports its own peak RSS ("main":
   for the reference and ours with 1 process, the whole work) and that of the largest child it
   reaped; with the orphans reaped here, "largest worker" is the largest other process.
Prints one row per (system, size), medians over --repeats interleaved runs: instances, CPU
seconds, wall seconds, instances per CPU-second, the ratio to the reference of the same size,
peak RSS of the main process and of the largest worker.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import functools
import glob
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax.data import (
    corpus,  # noqa: E402
    tokenizers,  # noqa: E402
)
from albert_jax.data.corpus import segmenter  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "reference_standin")
FILE_BYTES = 1 << 20
DOCUMENT_CHARACTERS = 8000
SENTENCE_CHARACTERS = 1000
BEAM_OPTIONS = "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=2"
SEED = 12345


# ---------------------------------------------------------------------------------------------
# The corpus.

def _text_sources() -> list[str]:
    return (sorted(glob.glob("/usr/share/doc/*/copyright"))
            + sorted(glob.glob("/usr/share/common-licenses/*"))
            + sorted(glob.glob("/usr/share/doc/**/*.gz", recursive=True)))


def _sentences(paragraph: str) -> list[str]:
    """The sentences of a paragraph with letters in them; a "sentence" over SENTENCE_CHARACTERS
    (a table, a list without full stops) is cut at spaces into lines of at most that."""
    sentences = []
    for sentence in segmenter.split_sentences(paragraph, "en"):
        if not re.search(r"[A-Za-z]", sentence):
            continue
        line = ""
        for word in sentence.split():
            if line and len(line) + 1 + len(word) > SENTENCE_CHARACTERS:
                sentences.append(line)
                line = ""
            line = f"{line} {word}" if line else word
        sentences.append(line)
    return sentences


def source_paragraphs(path: str) -> list[str]:
    """The blank-line-separated blocks of one source file (.gz decompressed); none for a file
    that cannot be read."""
    try:
        with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as file:
            text = file.read().decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return []
    return re.split(r"\n\s*\n", text)


def _documents(path: str) -> list[list[str]]:
    """The documents of one file: its sentences, cut into documents past DOCUMENT_CHARACTERS
    (at a paragraph end where one comes within 2x that)."""
    documents, document, characters = [], [], 0
    for paragraph in source_paragraphs(path):
        for sentence in _sentences(paragraph):
            document.append(sentence)
            characters += len(sentence)
            if characters >= 2 * DOCUMENT_CHARACTERS:
                documents.append(document)
                document, characters = [], 0
        if characters >= DOCUMENT_CHARACTERS:
            documents.append(document)
            document, characters = [], 0
    if document:
        documents.append(document)
    return documents


def write_corpus(directory: str, megabytes: float) -> str:
    """About `megabytes` of text in FILE_BYTES files of `directory`; returns their glob."""
    pattern = os.path.join(directory, "part*.txt")
    if os.path.exists(os.path.join(directory, "DONE")):
        return pattern
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    written, file_index, file = 0, 0, None
    for path in _text_sources():
        for document in _documents(path):
            if file is None or file.tell() >= FILE_BYTES:
                if file:
                    file.close()
                file = open(os.path.join(directory, f"part{file_index:03d}.txt"), "w")
                file_index += 1
            text = "\n".join(document) + "\n\n"
            file.write(text)
            written += len(text.encode())
            if written >= megabytes * 1e6:
                break
        if written >= megabytes * 1e6:
            break
    file.close()
    if written < megabytes * 1e6:
        sys.exit(f"only {written / 1e6:.1f} MB of text under /usr/share/doc; ask for less")
    open(os.path.join(directory, "DONE"), "w").close()
    return pattern


# ---------------------------------------------------------------------------------------------
# Measuring a whole process tree.

def _become_subreaper() -> None:
    # PR_SET_CHILD_SUBREAPER: orphaned descendants (e.g. Beam workers) are reparented here, so
    # their CPU time is counted when we reap them.
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed; this benchmark needs Linux")


def measured(command: list[str], log_path: str, env: dict[str, str]) -> dict:
    """Runs `command` to its end and reaps every process it left; CPU and peak RSS of all."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    cpu, orphan_rss = usage.ru_utime + usage.ru_stime, 0
    while True:  # Orphans reparented to us (we are the subreaper).
        try:
            _, _, orphan = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += orphan.ru_utime + orphan.ru_stime
        orphan_rss = max(orphan_rss, orphan.ru_maxrss)
    with open(log_path) as log:
        output = log.read()
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{output[-4000:]}")
    main_rss, children_rss = map(int, re.search(r"RSS_KB (\d+) (\d+)", output).groups())
    return {"cpu_s": cpu, "wall_s": seconds, "main_rss_mb": main_rss / 1024,
            "worker_rss_mb": max(children_rss, orphan_rss) / 1024, "output": output}


def _rss_reporting(code: str) -> list[str]:
    """`python -c code`, then print the peak RSS of the process itself and of the largest of
    the child processes it reaped (its workers)."""
    return [sys.executable, "-c", code + "\nimport resource\nprint('RSS_KB', *(resource."
            "getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))"]


def run_reference(arguments, corpus_glob: str, model: str, workdir: str, env: dict) -> dict:
    package = os.path.join(workdir, "reference", "albert")
    os.makedirs(package, exist_ok=True)
    for name in ("create_pretraining_data.py", "tokenization.py"):
        shutil.copy(os.path.join(arguments.reference_dir, name), package)
    open(os.path.join(package, "__init__.py"), "w").close()
    output = os.path.join(workdir, "reference.tfrecord")
    flags = [f"--input_file={','.join(sorted(glob.glob(corpus_glob)))}", f"--output_file={output}",
             f"--vocab_file={model}", f"--spm_model_file={model}", "--do_lower_case=True",
             f"--max_seq_length={arguments.seq_len}", f"--dupe_factor={arguments.dupe_factor}",
             "--max_predictions_per_seq=20", "--masked_lm_prob=0.15", "--ngram=3",
             "--short_seq_prob=0.1", f"--random_seed={SEED}"]
    code = (f"import sys, runpy\nsys.path[:0] = [{STANDIN!r}, {os.path.dirname(package)!r}]\n"
            f"sys.argv = ['create_pretraining_data.py'] + {flags!r}\n"
            "try:\n    runpy.run_module('albert.create_pretraining_data', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as exit:\n    assert not exit.code, exit.code")
    result = measured(_rss_reporting(code), os.path.join(workdir, "reference.log"), env)
    result["instances"] = int(re.search(r"Wrote (\d+) total instances", result["output"]).group(1))
    os.remove(output)
    return result


def _config_overrides(arguments, corpus_glob: str, model: str, data_dir: str) -> dict:
    return {"seed": SEED, "seq_len": arguments.seq_len, "data.corpus": corpus_glob,
            "data.tokenizer": model, "data.vocab_size": arguments.vocab_size,
            "data.dir": data_dir, "data.dupe_factor": arguments.dupe_factor,
            "data.eval_fraction": 0.0, "data.unit_bytes": int(arguments.unit_mb * 2**20)}


def _our_build(name: str, code: Callable[[dict], str], arguments, corpus_glob: str, model: str,
               workdir: str, env: dict) -> dict:
    """Runs `code(config overrides)` (a build into workdir/name), measured; then removes it."""
    data_dir = os.path.join(workdir, name)
    shutil.rmtree(data_dir, ignore_errors=True)
    overrides = _config_overrides(arguments, corpus_glob, model, data_dir)
    result = measured(_rss_reporting(code(overrides)), os.path.join(workdir, f"{name}.log"), env)
    result["instances"] = int(re.search(r"(\d+) examples in", result["output"]).group(1))
    shutil.rmtree(data_dir)
    return result


def _builder_code(overrides: dict) -> str:
    """`builder.build_from_config(config, num_processes=1)`: what `data build` runs, inline."""
    return ("from configs import pretrain\nfrom albert_jax.data.building import builder\n"
            "config = pretrain.get_config()\n"
            f"for key, value in {overrides!r}.items():\n"
            "    *path, name = key.split('.')\n"
            "    node = config\n"
            "    for part in path:\n        node = node[part]\n"
            "    node[name] = value\n"
            "builder.build_from_config(config, num_processes=1)")


def _beam_code(overrides: dict) -> str:
    """`albert-jax data build --config=configs/pretrain.py --beam_pipeline_options=...`."""
    config = os.path.join(os.path.dirname(HERE), "configs", "pretrain.py")
    argv = (["albert-jax", "data", "build", f"--config={config}",
             f"--beam_pipeline_options={BEAM_OPTIONS}"]
            + [f"--config.{key}={value}" for key, value in overrides.items()])
    # (sys.argv: ml_collections finds the --config.<key> overrides there)
    return (f"import sys\nfrom albert_jax import cli\nsys.argv = {argv!r}\ntry:\n    cli.main()\n"
            "except SystemExit as exit:\n    assert not exit.code, exit.code")


def beam_available() -> bool:
    with open(os.path.join(os.path.dirname(HERE), "albert_jax", "cli.py")) as file:
        return "beam_pipeline_options" in file.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference_dir", default=None,
                        help="a checkout of github.com/google-research/albert")
    parser.add_argument("--sizes_mb", default="16,48")
    parser.add_argument("--systems", default="reference,ours,beam")
    parser.add_argument("--reference_sizes_mb", default=None,
                        help="sizes the reference runs at (default: the smallest of --sizes_mb)")
    parser.add_argument("--unit_mb", type=float, default=4.0,
                        help="data.unit_bytes of our builds, in MiB (units spread over workers)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--workdir", default="/tmp/bench_data_build")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each row")
    arguments = parser.parse_args()
    systems = arguments.systems.split(",")
    if "reference" in systems and not arguments.reference_dir:
        sys.exit("--reference_dir: give a checkout of github.com/google-research/albert "
                 "(or leave `reference` out of --systems)")
    if "beam" in systems and not beam_available():
        print("`albert-jax data build` has no --beam_pipeline_options here: no beam row")
        systems.remove("beam")
    _become_subreaper()
    os.makedirs(arguments.workdir, exist_ok=True)
    sizes = sorted(map(float, arguments.sizes_mb.split(",")))
    reference_sizes = (set(map(float, arguments.reference_sizes_mb.split(",")))
                       if arguments.reference_sizes_mb else {sizes[0]})
    corpora = {size: write_corpus(os.path.join(arguments.workdir, f"corpus_{size:g}mb"), size)
               for size in sizes}
    model = os.path.join(arguments.workdir, f"spm{arguments.vocab_size}.model")
    if not os.path.exists(model):
        tokenizers.train((sentence for document in corpus.iter_documents(corpora[sizes[0]])
                         for sentence in document), model, arguments.vocab_size, seed=SEED)
    repo = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    runners = {"reference": run_reference,
               "ours": functools.partial(_our_build, "ours", _builder_code),
               "beam": functools.partial(_our_build, "beam", _beam_code)}
    runs = collections.defaultdict(list)  # (system, corpus bytes) -> results, interleaved
    for _ in range(arguments.repeats):
        for size in sizes:
            corpus_bytes = sum(os.path.getsize(path) for path in glob.glob(corpora[size]))
            for system in systems:
                if system == "reference" and size not in reference_sizes:
                    continue
                result = runners[system](arguments, corpora[size], model, arguments.workdir, env)
                result.pop("output")
                runs[system, corpus_bytes].append(result)
                print(f"{system} {corpus_bytes / 1e6:.1f} MB: {json.dumps(result)}", flush=True)

    print(f"\nseq_len {arguments.seq_len}, dupe_factor {arguments.dupe_factor}, SentencePiece "
          f"{arguments.vocab_size} pieces; CPU s = user + sys of every process of the command, "
          f"median of {arguments.repeats} interleaved run(s); peak RSS the largest of the runs")
    print("| system | corpus MB | instances | CPU s | wall s | instances / CPU-s | x reference "
          "| peak RSS main MB | peak RSS largest worker MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    speed = {}
    for (system, corpus_bytes), results in runs.items():
        cpu_s = statistics.median(result["cpu_s"] for result in results)
        instances = results[0]["instances"]
        speed[system, corpus_bytes] = instances / cpu_s
        reference = speed.get(("reference", corpus_bytes))
        ratio = f"{instances / cpu_s / reference:.2f}x" if reference else ""
        workers = [result["worker_rss_mb"] for result in results if result["worker_rss_mb"]]
        print(f"| {system} | {corpus_bytes / 1e6:.1f} | {instances:,} | {cpu_s:.1f} | "
              f"{statistics.median(result['wall_s'] for result in results):.1f} | "
              f"{instances / cpu_s:,.0f} | {ratio} | "
              f"{max(result['main_rss_mb'] for result in results):.0f} | "
              f"{f'{max(workers):.0f}' if workers else ''} |")


if __name__ == "__main__":
    main()
