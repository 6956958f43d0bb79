"""The `albert-jax` entry point: one command line for every job.

  albert-jax tokenizer train --config=configs/pretrain.py:runlocal
  albert-jax data build      --config=configs/pretrain.py:size=base [--config.data.dupe_factor=10]
                             [--beam_pipeline_options="runner=DataflowRunner,..."]  (on Beam)
  albert-jax data inspect    --config=configs/pretrain.py:size=base [--num_examples=3]
                             [--documents=N]  (the corpus's first N documents, as built)
  albert-jax pretrain        --config=configs/pretrain.py:size=base --workdir=DIR
  albert-jax finetune        --config=configs/glue.py:task=mnli --config.data.path=DIR
                             --config.init_from=PATH --workdir=DIR
  albert-jax evaluate        --workdir=DIR --split=dev|test
  albert-jax predict         --workdir=DIR --input=FILE [--output=OUT.jsonl|-]
                             [--top_k=5 --step=N]   (a pretraining workdir: fill-mask)
                             [--embeddings=cls|mean]   (one vector per row; .npy or JSONL)
  albert-jax checkpoint verify --workdir=DIR    (one line per checkpoint; exit 0 if all intact)
  albert-jax plan            --config=configs/pretrain.py:size=xxlarge --topology=v5e:16x16
                             [--devices=N --hbm_gib=16] [--num_slices=N] [--json]
                             (HBM per device; fits? what crosses slices)
  albert-jax squad-eval      DATA.json PREDICTIONS.json [--na-prob-file=F]
  albert-jax convert         --from=tf --path=model.ckpt-best --config_path=albert_config.json
                             --to=huggingface --output=DIR
  albert-jax export          --workdir=DIR --format=onnx|stablehlo|litert --output=DIR
                             [--quantize=int8] [--optimize=none]
                             (a finished run for serving: ONNX Runtime, JAX alone, or LiteRT)
  albert-jax ablate          --table=3|4|5|11|12 --workdir=DIR [--scale=demo|paper] [--seeds=N]
                             [--config.KEY=VALUE ...]   (a paper ablation table, every row)
  albert-jax sweep           --config=configs/glue.py:task=rte --config.sweep.space="{...}"
                             --workdir=DIR [--workers=N]   (a fine-tuning sweep on Optuna)
"""
from __future__ import annotations

import copy
import functools
import json
import logging
import os
import sys
from typing import Any, Callable, Sequence, TypeVar

import jax
import ml_collections
import numpy as np
from absl import app, flags
from absl import logging as absl_logging
from etils import epath
from ml_collections import config_flags

from albert_jax import ablation, distributed, file_lock, pretraining
from albert_jax import config as config_lib
from albert_jax.convert import formats, quantization_cost, serving, tokenizer_files
from albert_jax.convert.huggingface import FinetunedHead
from albert_jax.data import inspection, tokenizers
from albert_jax.data.building import builder, dataset_settings
from albert_jax.data.input import shard_copy
from albert_jax.errors import ConfigError, SweepStopped
from albert_jax.finetune import registry, sweep
from albert_jax.finetune import run as finetune_run
from albert_jax.finetune.squad import official_eval as squad_eval
from albert_jax.train import checkpoint, integrity, loop, sharding
from albert_jax.train import plan as plan_lib
from albert_jax.train import workdir as workdir_names

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/pretrain.py:size=base.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (local path or gs://).")
_SPLIT = flags.DEFINE_enum("split", "dev", ["dev", "test"], "evaluate: which sets to predict.")
_NUM_EXAMPLES = flags.DEFINE_integer("num_examples", 3, "data inspect: examples to decode.")
_DOCUMENTS = flags.DEFINE_integer("documents", None, "data inspect: print instead the corpus's "
                                  "first N documents as the build reads them (SPEC 1.2 text).",
                                  lower_bound=1)


class _MultihostParser(flags.BooleanParser):
    """--multihost, --nomultihost, or --multihost=<a jax cluster detection method>, e.g. mpi4py."""

    def parse(self, argument: str | int) -> bool | str:  # type: ignore[override]  # or a cluster
        if isinstance(argument, str) and argument in distributed.CLUSTERS:
            return argument
        try:
            return super().parse(argument)
        except ValueError:
            raise ValueError(f"use true, false or one of {sorted(distributed.CLUSTERS)}") from None


_MULTIHOST = flags.DEFINE_flag(flags.Flag(
    _MultihostParser(), None, "multihost", False,
    "Join a multi-host job: jax.distributed.initialize() with --coordinator_address, "
    "--num_processes, --process_id if given, else detected (TPU pod, SLURM, Open MPI); "
    "=NAME forces a jax cluster detection method (e.g. =mpi4py).", boolean=True))
_COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", None, "--multihost: HOST:PORT of process 0's coordinator.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "--multihost: number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "--multihost: this process, 0 .. N-1.")
_FROM = flags.DEFINE_enum("from", None, ["tf", "huggingface", "orbax"], "convert: source format.")
_TO = flags.DEFINE_enum("to", None, ["orbax", "huggingface"], "convert: target format.")
_FORMAT = flags.DEFINE_enum("format", None, list(serving.FORMATS), "export: the serving artifact "
                            "(onnx: model.onnx for ONNX Runtime; stablehlo: model.jax_export; "
                            "litert: model.tflite, int8 weights, [1, 128]).")
_OPTIMIZE = flags.DEFINE_enum("optimize", "onnxruntime", list(serving.OPTIMIZE), "export "
                              "--format=onnx: onnxruntime (fused for ONNX Runtime's CPU kernels, "
                              "the shared layer stored once) or none (the graph as traced).")
_QUANTIZE = flags.DEFINE_enum("quantize", "none", list(serving.QUANTIZE), "export --format=onnx: "
                              "int8 (ONNX Runtime dynamic quantization; its cost on the run's "
                              "dev split printed and in signature.json) or none.")
_PATH = flags.DEFINE_string("path", None, "convert: source checkpoint (file prefix or directory).")
_CONFIG_PATH = flags.DEFINE_string("config_path", None, "convert --from=tf: albert_config.json.")
_OUTPUT = flags.DEFINE_string("output", None, "convert, export: output directory. predict: the "
                              "JSON Lines file (default <workdir>/predictions/<input "
                              "name>.jsonl; -: standard output; .npy with --embeddings).")
_INPUT = flags.DEFINE_string("input", None, "predict: the file of examples (CSV, TSV, JSONL, "
                             "Parquet, or the task's own layout).")
_TOP_K = flags.DEFINE_integer("top_k", None, "predict on a pretraining workdir (fill-mask): "
                              "the most probable pieces listed per [MASK] (default 5).")
_EMBEDDINGS = flags.DEFINE_enum("embeddings", None, ["cls", "mean"], "predict: one vector per "
                                "row instead (cls: the [CLS] hidden state; mean: the mean over "
                                "the real tokens), as JSON Lines or a .npy --output.")
_STEP = flags.DEFINE_integer("step", None, "predict on a pretraining workdir: the checkpoint "
                             "(default the latest intact one).")
_TOPOLOGY = flags.DEFINE_string("topology", None, "plan: TPU slice, e.g. v5e:16x16 (needs the "
                                "[tpu] extra, libtpu; no TPU needed).")
_DEVICES = flags.DEFINE_integer("devices", None, "plan: N fake CPU devices instead of a TPU.")
_NUM_SLICES = flags.DEFINE_integer("num_slices", None, "plan: that many copies of --topology "
                                   "(or groups of --devices) joined over the data-center "
                                   "network; the config's mesh.num_slices must agree (left at "
                                   "1, it takes this). Default: mesh.num_slices.")
_HBM_GIB = flags.DEFINE_float("hbm_gib", 16.0, "plan --devices: GiB of memory per device assumed.")
_PEAK_TFLOPS = flags.DEFINE_float("peak_tflops", 197.0, "plan --devices: peak TFLOP/s per device "
                                  "assumed (197: TPU v5e bf16).")
_MFU = flags.DEFINE_float("mfu", 0.4, "plan: model FLOPs utilisation for the step time.")
_LEVERS = flags.DEFINE_boolean("levers", True, "plan: when it does not fit, try more fsdp, remat "
                               "and microbatches.")
_JSON = flags.DEFINE_boolean("json", False, "plan: print one JSON object.")
_BEAM_PIPELINE_OPTIONS = flags.DEFINE_string(
    "beam_pipeline_options", None, "data build: run the build's units on Apache Beam with these "
    "comma-separated key=value pipeline options, e.g. runner=FnApiRunner,direct_running_mode="
    "multi_processing,direct_num_workers=8 or runner=DataflowRunner,project=P,... (the Beam "
    "extra; without the flag: this machine's cores).")


FlagValue = TypeVar("FlagValue")


def _need(flag: flags.FlagHolder[FlagValue | None], command: str) -> FlagValue:
    if flag.value is None:
        raise app.UsageError(f"`albert-jax {command}` needs --{flag.name}")
    return flag.value


def _tokenizer_train() -> None:
    tokenizers.train_from_config(_need(_CONFIG, "tokenizer train"))


def _data_build() -> None:
    builder.build_from_config(_need(_CONFIG, "data build"),
                              beam_pipeline_options=_BEAM_PIPELINE_OPTIONS.value)


def _data_inspect() -> None:
    config = _need(_CONFIG, "data inspect")
    if _DOCUMENTS.value is not None:
        inspection.print_documents(config, _DOCUMENTS.value)
    else:
        inspection.inspect_from_config(config, _NUM_EXAMPLES.value)


def _join_hosts() -> None:
    """Multi-host jobs: the one call of jax.distributed.initialize, before any JAX work."""
    distributed.initialize(_MULTIHOST.value, coordinator_address=_COORDINATOR_ADDRESS.value,
                           num_processes=_NUM_PROCESSES.value, process_id=_PROCESS_ID.value)


def _pretrain() -> None:
    config, workdir = _need(_CONFIG, "pretrain"), _need(_WORKDIR, "pretrain")
    _join_hosts()
    task = pretraining.PretrainingTask(config, config_lib.model_config(config))
    loop.train_and_evaluate(config, workdir, task)


def _finetune() -> None:
    config, workdir = _need(_CONFIG, "finetune"), _need(_WORKDIR, "finetune")
    _join_hosts()
    finetune_run.finetune(config, workdir)


def _evaluate() -> None:
    workdir = _need(_WORKDIR, "evaluate")
    _join_hosts()
    finetune_run.evaluate(workdir, _SPLIT.value)


def _predict() -> None:
    workdir, input_path = _need(_WORKDIR, "predict"), _need(_INPUT, "predict")
    _join_hosts()
    options = {"top_k": _TOP_K.value} if _TOP_K.value is not None else {}
    finetune_run.predict(workdir, input_path, _OUTPUT.value, step=_STEP.value,
                         embeddings=_EMBEDDINGS.value, **options)


def _checkpoint_verify() -> None:
    """`<step> intact` or `<step> damaged: <reason>` for every checkpoint of the workdir, then
    `best/<step> ...` for the best one; exits 1 if any is damaged. Reads only."""
    workdir = epath.Path(_need(_WORKDIR, "checkpoint verify"))
    verdicts = []
    for directory, label in ((workdir / workdir_names.CHECKPOINTS_SUBDIR, ""),
                             (workdir / workdir_names.BEST_SUBDIR, f"{workdir_names.BEST_SUBDIR}/")):
        if not directory.is_dir():
            continue
        checkpointer = checkpoint.Checkpointer(directory, read_only=True)
        for step in checkpointer.all_steps():
            problem = checkpointer.check(step)
            if problem is not None:
                verdicts.append(f"{label}{step} damaged: {problem}")
            elif integrity.has_checksums(directory / str(step)):
                verdicts.append(f"{label}{step} intact")
            else:
                verdicts.append(f"{label}{step} intact (saved before checksums were recorded: "
                                "its files were not checked)")
        checkpointer.close()
    if not verdicts:
        raise FileNotFoundError(f"no checkpoint in {workdir}: expected "
                                f"{workdir_names.CHECKPOINTS_SUBDIR}/<step>/ or "
                                f"{workdir_names.BEST_SUBDIR}/<step>/ there")
    print("\n".join(verdicts), flush=True)
    if any(" damaged: " in verdict for verdict in verdicts):
        sys.exit(1)


def _plan_task(config: ml_collections.ConfigDict) -> tuple[Any, dict[str, Any]]:
    """The task of a pretraining or fine-tuning config and its train batch as shapes: no
    tokenizer or checkpoint is read (a fine-tuning architecture is config.model's preset)."""
    if "task" in config:  # a fine-tuning config
        task = registry.get(config.task).for_shapes(config)
    else:
        task = pretraining.PretrainingTask(config, config_lib.model_config(config))
    return task, task.train_batch_spec(config.batch_size)


def _plan() -> None:
    config = _need(_CONFIG, "plan")
    if (_TOPOLOGY.value is None) == (_DEVICES.value is None):
        raise ConfigError("albert-jax plan needs one of --topology=<TPU slice, e.g. v5e:16x16> "
                          "or --devices=N (CPU devices standing for N accelerators)")
    if _DEVICES.value is not None:
        # Before JAX starts its CPU backend: N fake devices (the last flag given wins).
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={_DEVICES.value}")
    # The plan is read from the compiler's own reports (its memory report, the time it took),
    # which a program loaded from a persistent compilation cache (JAX_COMPILATION_CACHE_DIR, as
    # pods often set) does not carry: this process compiles everything itself.
    jax.config.update("jax_enable_compilation_cache", False)
    num_slices = _plan_num_slices(config)
    if _TOPOLOGY.value is not None:
        target = plan_lib.tpu_target(_TOPOLOGY.value, num_slices)
    else:
        assert _DEVICES.value is not None  # one of the two, checked above
        target = plan_lib.cpu_target(_DEVICES.value, _HBM_GIB.value, _PEAK_TFLOPS.value, num_slices)
    result = plan_lib.plan(config, _plan_task, target, mfu=_MFU.value, try_levers=_LEVERS.value)
    if "task" not in config:  # pretraining: the local disk a host needs for shards in a bucket
        result["hosts"] = plan_lib.num_hosts(target)
        result["data_local_bytes_per_host"] = _data_local_bytes(config, result["hosts"])
    print(json.dumps(result) if _JSON.value else plan_lib.format_plan(result), flush=True)


def _plan_num_slices(config: ml_collections.ConfigDict) -> int:
    """The slices of plan's target: --num_slices, which a config leaving mesh.num_slices at 1
    (not set on the command line) takes; a config that names another count is refused."""
    configured = sharding.num_slices(config.mesh)
    wanted = _NUM_SLICES.value
    if wanted is None or wanted == configured:
        return configured
    overridden = "mesh.num_slices" in config_flags.get_override_values(flags.FLAGS["config"])
    if configured != 1 or overridden:
        raise ConfigError(f"--num_slices={wanted} but config mesh.num_slices={configured}: make "
                          f"them agree (e.g. --config.mesh.num_slices={wanted})")
    with config.unlocked():
        config.mesh.num_slices = wanted
    return wanted


def _data_local_bytes(config: ml_collections.ConfigDict, hosts: int) -> int | None:
    """shard_copy.local_bytes_per_host of config's dataset; None if it cannot be found (no
    tokenizer or corpus yet to name it, or not built)."""
    try:
        dataset_dir = dataset_settings.dataset_dir(config)
    except (FileNotFoundError, ValueError):
        return None
    return shard_copy.local_bytes_per_host(dataset_dir, hosts)


def _convert() -> None:
    source, target, path = _need(_FROM, "convert"), _need(_TO, "convert"), _need(_PATH, "convert")
    if source == "orbax" and target == "huggingface" and finetune_run.is_finetuning_workdir(path):
        # A fine-tuned workdir: its best checkpoint, as its task's transformers class.
        finetune_run.export_huggingface(path, _need(_OUTPUT, "convert"))
        return
    model_config = formats.convert(source=source, target=target, path=path,
                                   output=_need(_OUTPUT, "convert"), config_path=_CONFIG_PATH.value)
    tokenizer_files.carry_tokenizer(source, path, _CONFIG_PATH.value, target,
                                    _need(_OUTPUT, "convert"),
                                    model_config.max_position_embeddings)


def _export() -> None:
    """A fine-tuning run's best dev checkpoint (a pretraining run's latest: its MLM logits) as
    a serving artifact (convert/serving.py)."""
    workdir, export_format = _need(_WORKDIR, "export"), _need(_FORMAT, "export")
    output = _need(_OUTPUT, "export")
    run = finetune_run.load_finished_run(workdir)
    is_finetuned = finetune_run.is_finetuning_workdir(os.fspath(run.run_dir))
    head = run.task.huggingface_head() if is_finetuned else FinetunedHead(serving.MASKED_LM)
    model_config = run.task.model_config
    assert run.task.tokenizer is not None  # a finished run's task has its tokenizer
    served = serving.ServedModel(
        model_config, run.task.model, jax.tree.map(np.asarray, run.params), head,
        tokenizer_files.huggingface_files(run.task.tokenizer,
                                          model_config.max_position_embeddings),
        run.task.tokenizer.settings)
    cost = quantization_cost.finetuned_cost if is_finetuned else quantization_cost.pretraining_cost
    for path in serving.export(served, export_format, output, optimize=_OPTIMIZE.value,
                               quantize=_QUANTIZE.value,
                               score=functools.partial(cost, run)):
        print(f"wrote {path}", flush=True)


_TABLE = flags.DEFINE_enum("table", None, ["3", "4", "5", "11", "12"],
                           "ablate: the paper's table (configs/ablation.py TABLES).")
_SCALE = flags.DEFINE_enum("scale", "demo", ["demo", "paper"], "ablate: demo (the demo corpus, "
                           "a CPU-sized model) or paper (the paper's recipe; set data.corpus).")
_SEEDS = flags.DEFINE_integer("seeds", 1, "ablate: seeds per row (mean and std in table.md).")
ABLATION_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "configs", "ablation.py")


def _ablate() -> None:
    """Every row x seed of a paper ablation table (albert_jax/ablation.py); the rows are
    configs/ablation.py's, each with the command line's --config.KEY=VALUE overrides."""
    table, workdir = int(_need(_TABLE, "ablate")), _need(_WORKDIR, "ablate")
    config_flag = flags.FLAGS["config"]
    tables = ablation.load_config_module(config_flags.get_config_filename(config_flag))
    configs = ablation.row_configs(tables.get_config, table, tuple(tables.TABLES[table]),
                                   _SCALE.value, config_flags.get_override_values(config_flag))
    ablation.run_table(configs, workdir, _SEEDS.value)


_WORKERS = flags.DEFINE_integer("workers", 1, "sweep: worker processes started on this machine, "
                                "each running one trial at a time (e.g. one per accelerator).",
                                lower_bound=1)


def _sweep() -> None:
    """A study of fine-tuning runs (finetune/sweep/): every trial an `albert-jax finetune` of
    the command line's config with the trial's values, in W/trials/<number>/."""
    config, workdir = _need(_CONFIG, "sweep"), _need(_WORKDIR, "sweep")
    config_flag = flags.FLAGS["config"]
    # The trials' command lines (written to their output.log) leave the storage out: a
    # database URL may hold a password, and a trial's run never opens the study.
    config_args = [f"--config={config_flags.get_config_filename(config_flag)}"] + [
        sweep.override_flag(key, value)
        for key, value in config_flags.get_override_values(config_flag).items()
        if key != "sweep.storage"]
    sweep.run_sweep(config, config_args, workdir, _WORKERS.value)


def _with_ablation_config(words: list[str], args: list[str]) -> list[str]:
    """`ablate` reads configs/ablation.py unless --config names another file, so that
    --config.KEY=VALUE overrides work without a --config flag."""
    if words != ["ablate"] or any(arg == "--config" or arg.startswith("--config=")
                                  for arg in args):
        return args
    return [args[0], f"--config={ABLATION_CONFIG}", *args[1:]]


COMMANDS: dict[tuple[str, ...], Callable[[], None]] = {
    ("tokenizer", "train"): _tokenizer_train,
    ("data", "build"): _data_build,
    ("data", "inspect"): _data_inspect,
    ("pretrain",): _pretrain,
    ("finetune",): _finetune,
    ("evaluate",): _evaluate,
    ("predict",): _predict,
    ("checkpoint", "verify"): _checkpoint_verify,
    ("plan",): _plan,
    ("convert",): _convert,
    ("export",): _export,
    ("ablate",): _ablate,
    ("sweep",): _sweep,
}


# The flags each command reads besides the multi-host ones (launchers add --multihost to any
# command line). A flag of ours that the command does not read is refused, not silently
# ignored; absl's own (--verbosity, ...) and libraries' flags go with every command.
_MULTIHOST_FLAGS = ("multihost", "coordinator_address", "num_processes", "process_id")
COMMAND_FLAGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("tokenizer", "train"): ("config",),
    ("data", "build"): ("config", "beam_pipeline_options"),
    ("data", "inspect"): ("config", "num_examples", "documents"),
    ("pretrain",): ("config", "workdir"),
    ("finetune",): ("config", "workdir"),
    ("evaluate",): ("workdir", "split"),
    ("predict",): ("workdir", "input", "output", "top_k", "step", "embeddings"),
    ("checkpoint", "verify"): ("workdir",),
    ("plan",): ("config", "topology", "devices", "num_slices", "hbm_gib", "peak_tflops", "mfu",
                "levers", "json"),
    ("convert",): ("from", "to", "path", "config_path", "output"),
    ("export",): ("workdir", "format", "output", "optimize", "quantize"),
    ("ablate",): ("config", "table", "scale", "seeds", "workdir"),
    ("sweep",): ("config", "workdir", "workers"),
}


def _usage() -> str:
    commands = __doc__.split("\n\n", 1)[1].rstrip()  # the module docstring's command lines
    return f"usage:\n{commands}\n(see README.md; `albert-jax <command> --helpfull` lists every flag)"


def _command_words(argv: Sequence[str]) -> list[str]:
    """The command's words: what comes after the program name and before the first flag."""
    words = []
    for word in argv[1:]:
        if word.startswith("-"):
            break
        words.append(word)
    return words


def _check_flags_of(words: list[str], args: Sequence[str]) -> None:
    """Raises flags.Error for a flag of ours that `albert-jax WORDS` does not read."""
    ours = set(_MULTIHOST_FLAGS).union(*COMMAND_FLAGS.values())
    takes = COMMAND_FLAGS[tuple(words)]
    for arg in args:
        if arg == "--":
            break
        name = arg.lstrip("-").split("=", 1)[0].split(".", 1)[0]  # --config.a.b=v: config
        if name not in ours and name.startswith("no"):
            name = name[2:]  # --nojson
        if arg.startswith("-") and name in ours and name not in takes + _MULTIHOST_FLAGS:
            raise flags.Error(f"--{name} is not a flag of `albert-jax {' '.join(words)}`, which "
                              f"reads {', '.join('--' + flag for flag in takes)}")


def check_command_line(argv: Sequence[str]) -> ml_collections.ConfigDict | None:
    """Parses `albert-jax ...` as `main` does and runs nothing: the command exists, every flag
    is one it reads with a value of its type, --config loads and every --config.KEY=VALUE
    names a key of it and converts. Returns the config (None for a command without one).

    Raises app.UsageError (unknown command), flags.Error (a flag or value; a config file that
    fails to load), AttributeError or KeyError (an override of a key the config lacks). The
    docs' commands are checked with it (tests/test_docs_commands.py).
    """
    words = _command_words(argv)
    if words[:1] == ["squad-eval"]:  # positional files; its own parser reads the rest
        return None
    if tuple(words) not in COMMANDS:
        raise app.UsageError(f"unknown command {' '.join(words)!r}")
    args = _with_ablation_config(words, [argv[0], *argv[1 + len(words):]])
    _check_flags_of(words, args[1:])
    # Flags of their own, so that the process's flags keep their values, and a config flag
    # that reads its overrides from these arguments instead of sys.argv.
    flag_values = flags.FlagValues()
    for name in {flags.FLAGS[name].name for name in flags.FLAGS}:
        if name.split(".", 1)[0] != "config":
            flag_values[name] = copy.deepcopy(flags.FLAGS[name])
    config_flags.DEFINE_config_file("config", None, flags.FLAGS["config"].help,
                                    flag_values=flag_values, lock_config=True, sys_argv=args)
    flag_values(args)
    config = flag_values["config"].value
    if config is not None:
        config.keys()  # ml_collections defers the error of a file that failed to load to here
    return config


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    words = _command_words(argv)
    if words[:1] == ["squad-eval"]:  # positional file arguments, as the official script takes
        sys.exit(squad_eval.main(argv[2:]))
    command = COMMANDS.get(tuple(words))
    if command is None:
        sys.exit(f"albert-jax: unknown command {' '.join(words)!r}\n{_usage()}")
    rest = _with_ablation_config(words, [argv[0]] + argv[1 + len(words):])
    try:
        _check_flags_of(words, rest[1:])
        remaining = flags.FLAGS(rest)  # parsed here, so a bad config is one line, not a trace
    except flags.Error as error:
        sys.exit(f"albert-jax {' '.join(words)}: error: {_flag_error(error)}")
    except (AttributeError, KeyError) as error:  # an override of a key the config lacks
        sys.exit(f"albert-jax {' '.join(words)}: error: {_unknown_key(error, rest)}")
    app.run(lambda _: _run(command, " ".join(words)), argv=rest,
            flags_parser=lambda _: remaining)


def _unknown_key(error: Exception, argv: list[str]) -> str:
    """One line for `--config.a.b=v` naming a key the config does not have, with
    ml_collections' nearest valid name."""
    detail = str(error).strip("'\"").replace("\\n", "\n").replace("\\'", "'")
    name, _, hint = detail.partition("\n")
    overrides = [arg.split("=", 1)[0][2:] for arg in argv
                 if arg.startswith("--config.") and arg.split("=", 1)[0].endswith("." + name.strip("'"))]
    key = overrides[0] if overrides else name
    return f"unknown config key {key!r}. {hint}".strip() + " (see the config file for its keys)"


def _flag_error(error: flags.Error) -> str:
    """The message of a flag error; for a config file that raised, that exception's message
    (ml_collections wraps it with its whole traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    raised = [line for line in lines if line.startswith("albert_jax.errors.")]
    return raised[-1].split(": ", 1)[1] if raised else lines[0]


def _use_compilation_cache() -> None:
    """JAX's persistent compilation cache in the directory of the config's `compilation_cache`
    (a command without --config: the --workdir run's config.json; default
    config_lib.DEFAULT_COMPILATION_CACHE; "": off), unless JAX_COMPILATION_CACHE_DIR names one.
    `plan` turns it off itself: it reads the compiler's own reports."""
    if jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]  # an option made at runtime
        return
    directory = config_lib.DEFAULT_COMPILATION_CACHE
    if _CONFIG.value is not None:
        directory = _CONFIG.value.get("compilation_cache", directory)
    elif _WORKDIR.value is not None:
        saved = epath.Path(_WORKDIR.value) / workdir_names.CONFIG_FILE
        if saved.exists():
            directory = json.loads(saved.read_bytes()).get("compilation_cache", directory)
    if directory:
        jax.config.update("jax_compilation_cache_dir", os.path.expanduser(directory))


def _run(command: Callable[[], None], name: str) -> None:
    """Runs a command; errors it raises on purpose print as one clear line, not a traceback."""
    if not flags.FLAGS["verbosity"].present:
        # Library INFO logs (Orbax, TFDS) drown the progress lines; --verbosity=0 shows them.
        absl_logging.set_verbosity(absl_logging.WARNING)
        # TFDS warns of what it cannot know is fine here (our builder config is a "custom data
        # configuration"; a folder being built "has no dataset_info.json" yet), in front of
        # every build and of its one-line errors: nothing a user can act on.
        logging.getLogger("absl").addFilter(_not_from_tfds)
    try:
        _use_compilation_cache()
        command()
    except (ConfigError, loop.TrainingDiverged, ValueError, OSError,  # OSError: disk, paths
            ImportError,  # an extra that is not installed: the message names it
            file_lock.LockHeld, SweepStopped) as error:
        if os.environ.get("ALBERT_JAX_TRACEBACK"):
            raise
        sys.exit(f"albert-jax {name}: error: {error}\n"
                 "(set ALBERT_JAX_TRACEBACK=1 to see where it was raised)")



def _not_from_tfds(record: logging.LogRecord) -> bool:
    """False for a log record written by TensorFlow Datasets' own modules."""
    return f"{os.sep}tensorflow_datasets{os.sep}" not in record.pathname


if __name__ == "__main__":
    main()
