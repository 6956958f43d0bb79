#!/usr/bin/env bash
# The wheels the accelerator check needs on a GPU machine that reaches no package registry:
# what this package imports (setup.cfg install_requires, and what the check's modules import)
# that the machine's image lacks, for Python 3.12 on manylinux x86-64, into .accel_wheels/
# (ignored by git; the device tool carries it only when its `carry` list names it).
#
#   bash benchmarks/accelerator_wheels.sh [DIR]        # here, before the GPU is lent
#
# The image (jax with CUDA, flax, optax, orbax-checkpoint, torch, sentencepiece, tensorstore,
# etils, absl-py, protobuf, pyarrow, psutil, requests, matplotlib ...) is described in the
# device tool's KINDS.md; it has transformers 5, which this package does not support (setup.cfg
# pins <5), so transformers 4 travels with the tokenizers and huggingface-hub it needs.
# benchmarks/RESULTS.md "Accelerator check" has the recipe that installs them there.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.accel_wheels}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$DIR"
rm -f "$DIR"/*.whl

# Pinned to the versions the CPU suite runs (the project's .venv), Python 3.12 wheels.
BINARY=(
  ml-collections==1.1.0            # configs, every module
  grain==0.2.18                    # data pipeline, checkpointed iterators (train/checkpoint.py)
  array-record==0.8.6              # grain's and TFDS's record files
  tensorflow-datasets==4.9.10      # data/building/dataset_settings.py (imported by the data modules)
  tensorflow-metadata==1.21.0      # TFDS
  googleapis-common-protos==1.76.0 # tensorflow-metadata
  dm-tree==0.1.10                  # TFDS
  immutabledict==4.3.1             # TFDS
  simple-parsing==0.1.9            # TFDS
  docstring-parser==0.18.0         # simple-parsing
  termcolor==3.3.0                 # TFDS
  toml==0.10.2                     # TFDS
  portpicker==1.6.0                # grain
  google-crc32c==1.9.0             # data/input/shard_copy.py (imported by the CLI and the pipeline)
  transformers==4.57.6             # the HuggingFace side (setup.cfg: transformers<5)
  tokenizers==0.22.2               # transformers 4.57
  huggingface-hub==0.36.2          # transformers 4.57
)
# Published as a source archive only (pure Python): built into a wheel here.
SOURCE_ONLY=(
  promise==2.3                     # TFDS
)

"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$DIR" "${BINARY[@]}"
"$PYTHON" -m pip wheel --quiet --no-deps -w "$DIR" "${SOURCE_ONLY[@]}"

count=$(ls "$DIR"/*.whl | wc -l)
expected=$(( ${#BINARY[@]} + ${#SOURCE_ONLY[@]} ))
if [ "$count" -ne "$expected" ]; then
  echo "expected $expected wheels in $DIR, found $count" >&2
  exit 1
fi
echo "$count wheels, $(du -sh "$DIR" | cut -f1), in $DIR"
