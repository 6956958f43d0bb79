"""Instances per CPU-second of a whole data build: google-research/albert's
create_pretraining_data.py (the reference) against `albert-jax data build`.

  python benchmarks/bench_data_build.py --reference_dir=DIR [--sizes_mb=16,48] [--workdir=DIR]
      [--systems=reference,ours,beam] [--vocab_size=8000] [--seq_len=512] [--dupe_factor=5]

--reference_dir: a checkout of https://github.com/google-research/albert (its
create_pretraining_data.py and tokenization.py are copied into a package `albert` and run as
they are, with `benchmarks/reference_standin/` first on their path: a stand-in `tensorflow`
that provides the TF 1.x flags, gfile, logging, tf.train.Example protos and a TFRecord writer
they use, so no TensorFlow is needed).

What it does, all seeds fixed:
1. Makes a corpus of each size from text already on a Debian/Ubuntu machine that our tests never
   made: /usr/share/doc/*/copyright, /usr/share/common-licenses/*, then the gzipped docs under
   /usr/share/doc (READMEs, NEWS, changelogs), in that (sorted) order; one sentence per line
   (`corpus.split_sentences` of each paragraph), a blank line between documents (SPEC 1.2; a
   file is one document, cut at paragraph ends past 8,000 characters), over 1 MB files. The
   smaller corpus is a prefix of the larger.
2. Trains one SentencePiece model of --vocab_size pieces on the smallest corpus with our
   tokenizer code (`tokenizer.train`, SPEC 2.1).
3. Builds each corpus with each system in a fresh process, seq --seq_len, --dupe_factor passes,
   masked_lm_prob 0.15, 20 predictions, 3-grams, short_seq_prob 0.1, SOP; ours with
   data.eval_fraction 0 (one split, like the reference):
     reference  `python -m albert.create_pretraining_data` (random_seed 12345), one TFRecord file;
     ours       `builder.build_from_config(config, num_processes=1)`, what `albert-jax data build`
                runs, in one process (no pool);
     beam       `albert-jax data build --beam_pipeline_options=runner=FnApiRunner,
                direct_running_mode=multi_processing,direct_num_workers=2` (where the CLI has it).
   This process makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every process
   a build starts, reaped by it or orphaned, is waited for here: "CPU s" is user + sys of all of
   them (getrusage of the children), "peak RSS" the largest of any one process (main or worker).
   The command's own process also reports its RSS alone (`main`).
Prints one row per (system, size): instances, CPU seconds, instances per CPU-second, the ratio
to the reference of the same size, peak RSS of the main process and of the largest worker.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # configs/
from albert_jax.data import corpus, tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STANDIN = os.path.join(HERE, "reference_standin")
FILE_BYTES = 1 << 20
DOCUMENT_CHARACTERS = 8000
BEAM_OPTIONS = "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=2"
SEED = 12345


# ---------------------------------------------------------------------------------------------
# The corpus.

def _text_sources() -> list[str]:
    return (sorted(glob.glob("/usr/share/doc/*/copyright"))
            + sorted(glob.glob("/usr/share/common-licenses/*"))
            + sorted(glob.glob("/usr/share/doc/**/*.gz", recursive=True)))


def _documents(path: str) -> list[list[str]]:
    """The documents of one file: sentences of its paragraphs, cut past DOCUMENT_CHARACTERS."""
    try:
        with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as file:
            text = file.read().decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return []
    documents, document, characters = [], [], 0
    for paragraph in re.split(r"\n\s*\n", text):
        sentences = [s for s in corpus.split_sentences(paragraph) if re.search(r"[A-Za-z]", s)]
        document.extend(sentences)
        characters += sum(map(len, sentences))
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
    cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
    while True:  # Orphans reparented to us (we are the subreaper).
        try:
            _, _, orphan = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += orphan.ru_utime + orphan.ru_stime
        rss = max(rss, orphan.ru_maxrss)
    with open(log_path) as log:
        output = log.read()
    if process.returncode:
        sys.exit(f"{' '.join(command)} failed ({process.returncode}):\n{output[-4000:]}")
    main_rss = re.search(r"MAIN_RSS_KB (\d+)", output)
    return {"cpu_s": cpu, "wall_s": seconds, "peak_rss_mb": rss / 1024,
            "main_rss_mb": int(main_rss.group(1)) / 1024 if main_rss else None, "output": output}


def _rss_reporting(code: str) -> list[str]:
    """`python -c code`, then print the process's own peak RSS (RUSAGE_SELF)."""
    return [sys.executable, "-c", code + "\nimport resource\nprint('MAIN_RSS_KB', "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"]


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
            "data.eval_fraction": 0.0}


def _instances(output: str) -> int:
    return int(re.search(r"(\d+) examples in", output).group(1))


def run_ours(arguments, corpus_glob: str, model: str, workdir: str, env: dict) -> dict:
    data_dir = os.path.join(workdir, "ours")
    shutil.rmtree(data_dir, ignore_errors=True)
    code = ("from configs import pretrain\nfrom albert_jax.data import builder\n"
            "config = pretrain.get_config()\n"
            f"for key, value in {_config_overrides(arguments, corpus_glob, model, data_dir)!r}"
            ".items():\n"
            "    *path, name = key.split('.')\n"
            "    node = config\n"
            "    for part in path:\n        node = node[part]\n"
            "    node[name] = value\n"
            "builder.build_from_config(config, num_processes=1)")
    result = measured(_rss_reporting(code), os.path.join(workdir, "ours.log"), env)
    result["instances"] = _instances(result["output"])
    shutil.rmtree(data_dir)
    return result


def beam_available() -> bool:
    with open(os.path.join(os.path.dirname(HERE), "albert_jax", "cli.py")) as file:
        return "beam_pipeline_options" in file.read()


def run_beam(arguments, corpus_glob: str, model: str, workdir: str, env: dict) -> dict:
    data_dir = os.path.join(workdir, "beam")
    shutil.rmtree(data_dir, ignore_errors=True)
    overrides = _config_overrides(arguments, corpus_glob, model, data_dir)
    command = ("from albert_jax import cli\nargv = ['albert-jax', 'data', "
               f"'build', '--config={os.path.join(os.path.dirname(HERE), 'configs/pretrain.py')}', "
               f"'--beam_pipeline_options={BEAM_OPTIONS}'] + "
               f"{[f'--config.{key}={value}' for key, value in overrides.items()]!r}\n"
               "try:\n    cli.main(argv)\nexcept SystemExit as exit:\n    assert not exit.code, exit.code")
    result = measured(_rss_reporting(command), os.path.join(workdir, "beam.log"), env)
    result["instances"] = _instances(result["output"])
    shutil.rmtree(data_dir)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference_dir", default=None,
                        help="a checkout of github.com/google-research/albert")
    parser.add_argument("--sizes_mb", default="16,48")
    parser.add_argument("--systems", default="reference,ours,beam")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--workdir", default="/tmp/bench_data_build")
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
    corpora = {size: write_corpus(os.path.join(arguments.workdir, f"corpus_{size:g}mb"), size)
               for size in sizes}
    model = os.path.join(arguments.workdir, f"spm{arguments.vocab_size}.model")
    if not os.path.exists(model):
        tokenizer.train((sentence for document in corpus.iter_documents(corpora[sizes[0]])
                         for sentence in document), model, arguments.vocab_size, seed=SEED)
    repo = os.path.dirname(HERE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    runners = {"reference": run_reference, "ours": run_ours, "beam": run_beam}
    rows = []
    for size in sizes:
        corpus_bytes = sum(os.path.getsize(path) for path in glob.glob(corpora[size]))
        for system in systems:
            result = runners[system](arguments, corpora[size], model, arguments.workdir, env)
            result.pop("output")
            rows.append((system, corpus_bytes, result))
            print(f"{system} {corpus_bytes / 1e6:.1f} MB: {json.dumps(result)}", flush=True)

    print(f"\nseq_len {arguments.seq_len}, dupe_factor {arguments.dupe_factor}, SentencePiece "
          f"{arguments.vocab_size} pieces; CPU s = user + sys of every process of the command")
    print("| system | corpus MB | instances | CPU s | wall s | instances / CPU-s | x reference "
          "| peak RSS main MB | peak RSS largest process MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    speed = {}
    for system, corpus_bytes, result in rows:
        per_cpu = result["instances"] / result["cpu_s"]
        speed[system, corpus_bytes] = per_cpu
        reference = speed.get(("reference", corpus_bytes))
        ratio = f"{per_cpu / reference:.2f}x" if reference else ""
        main_rss = f"{result['main_rss_mb']:.0f}" if result["main_rss_mb"] else ""
        print(f"| {system} | {corpus_bytes / 1e6:.1f} | {result['instances']:,} | "
              f"{result['cpu_s']:.1f} | {result['wall_s']:.1f} | {per_cpu:,.0f} | {ratio} | "
              f"{main_rss} | {result['peak_rss_mb']:.0f} |")


if __name__ == "__main__":
    main()
