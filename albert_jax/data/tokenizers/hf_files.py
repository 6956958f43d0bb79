"""A SentencePiece model as transformers tokenizer files that give our ids (SPEC 2.1-2.3).

  files = huggingface_files(model_proto, TextSettings(do_lower_case=False), model_max_length=512)
  # {"spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}

`AutoTokenizer.from_pretrained(folder)` opens `AlbertTokenizerFast` on `tokenizer.json`, a
`tokenizers` pipeline that spells out what `SentencePieceTokenizer.encode` does:
  - ALBERT's `preprocess_text` (SPEC 2.2): the whitespace of Python's `str.split()` folded to one
    space and stripped, NFKD, the characters `unicodedata.combining` marks dropped (not with
    `keep_accents`), Python's `lower()` (its final sigma too) when `do_lower_case`. Unlike
    HuggingFace's own conversion (`AlbertConverter`): no ``/'' rewrite (the reference has none),
    not `StripAccents` (it drops the nonspacing marks, Mn, another set than Python's), and NFC
    before the character map;
  - SentencePiece's normalization, read from the model file's normalizer spec: the precompiled
    character map (nmt_nfkc), runs of spaces folded, the dummy "▁" prefix;
  - the unigram model with the file's pieces and scores;
  - [CLS] [SEP] [MASK] <pad> <unk> spelled in a text are those tokens, as in transformers'
    ALBERT tokenizers and every ALBERT of the HuggingFace hub (a `fill-mask` pipeline finds its
    [MASK]), the text between them tokenized on its own; our `encode` cuts them into pieces like
    any other characters, as the reference does (SPEC 2);
  - [CLS] A [SEP] B [SEP] with segment ids 0 and 1.
The model file is read without protobuf (the few fields needed are parsed from its wire format):
sentencepiece's generated module asks for a newer protobuf than apache-beam allows (< 7).
`AutoTokenizer(..., use_fast=False)` opens `AlbertTokenizer` on spiece.model with the same
casing and accents (`tokenizer_config.json`); it rewrites ``/'' to " first, as HuggingFace
always did.

What a pipeline cannot express: the SPEC 2.3 digit-comma rule re-encodes a piece such as "0,"
after the model has chosen it. As in HuggingFace's conversion, such pieces score 100 lower, so
the model cuts "0" "," where it can: that agrees with `data.comma_rule=hf` in all but rare
cases, not with the reference's rule, which adds a "▁" (a model without such pieces is exact
either way). Segmentations of equal score (a long run of one character) may be broken
differently: SentencePiece sums float32 scores, `tokenizers` float64.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
import unicodedata
from typing import Iterator

import sentencepiece as spm

from albert_jax.data.tokenizers import wordpiece
from albert_jax.data.tokenizers.preprocessing import SPIECE_UNDERLINE, needs_comma_split
from albert_jax.data.tokenizers.text_settings import TextSettings
from albert_jax.data.tokenizers.tokenizer import CLS, HF_SPM_FILE, MASK, PAD, SEP, UNK

# sentencepiece_model.proto: ModelProto.trainer_spec = 2, .normalizer_spec = 3;
# TrainerSpec.model_type = 3 (UNIGRAM = 1);
# NormalizerSpec.name = 1, .precompiled_charsmap = 2, .add_dummy_prefix = 3,
# .remove_extra_whitespaces = 4.
_TRAINER_SPEC, _NORMALIZER_SPEC = 2, 3
_MODEL_TYPE, _UNIGRAM = 3, 1
_NAME, _CHARSMAP, _DUMMY_PREFIX, _EXTRA_WHITESPACES = 1, 2, 3, 4


def _wire_fields(message: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as int, length-delimited fields as
    bytes; 32- and 64-bit fields (the pieces' float scores) are skipped."""
    position = 0

    def varint() -> int:
        nonlocal position
        value, shift = 0, 0
        while True:
            byte = message[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while position < len(message):
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            yield number, varint()
        elif wire_type == 2:
            length = varint()
            yield number, message[position:position + length]
            position += length
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type}")


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """What the tokenizer.json needs of a SentencePiece model file beyond its pieces and scores
    (which the sentencepiece API reads).

    Attributes:
      unigram: whether it is a unigram model (ALBERT's; BPE has no exact pipeline here).
      normalization: the normalizer's name ("nmt_nfkc" for ALBERT's).
      charsmap: its precompiled character map (b"" for none).
      add_dummy_prefix, remove_extra_whitespaces: the normalizer's switches.
    """

    unigram: bool
    normalization: str
    charsmap: bytes
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool

    @staticmethod
    def parse(model_proto: bytes) -> "ModelFile":
        unigram = True
        normalization, charsmap, dummy_prefix, extra_whitespaces = "", b"", True, True
        for number, value in _wire_fields(model_proto):
            if number == _TRAINER_SPEC and isinstance(value, bytes):
                unigram = dict(_wire_fields(value)).get(_MODEL_TYPE, _UNIGRAM) == _UNIGRAM
            elif number == _NORMALIZER_SPEC and isinstance(value, bytes):
                spec = dict(_wire_fields(value))
                normalization = bytes(spec.get(_NAME, b"")).decode("utf-8")
                charsmap = bytes(spec.get(_CHARSMAP, b""))
                dummy_prefix = bool(spec.get(_DUMMY_PREFIX, True))
                extra_whitespaces = bool(spec.get(_EXTRA_WHITESPACES, True))
        return ModelFile(unigram, normalization, charsmap, dummy_prefix, extra_whitespaces)


def _character_class(codes: list[int]) -> str:
    """An Onig character class of `codes` (sorted), as ranges."""
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "[" + "".join(f"\\x{{{low:X}}}" if low == high else f"\\x{{{low:X}}}-\\x{{{high:X}}}"
                         for low, high in ranges) + "]"


@functools.lru_cache(maxsize=1)
def _python_classes() -> tuple[str, str]:
    """Onig classes of the characters Python's `str.split()` splits at and of those
    `unicodedata.combining` marks (what `preprocess_text` drops after NFKD), from this Python's
    Unicode tables."""
    whitespace, combining = [], []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if char.isspace():
            whitespace.append(code)
        elif unicodedata.combining(char):
            combining.append(code)
    return _character_class(whitespace), _character_class(combining)


def _reserved(processor: spm.SentencePieceProcessor, piece_id: int) -> bool:
    """Whether SentencePiece keeps piece `piece_id` out of its segmentations."""
    return bool(processor.is_control(piece_id) or processor.is_unknown(piece_id)
                or processor.is_unused(piece_id) or processor.is_byte(piece_id))


def _tokenizer_json(model_proto: bytes, settings: TextSettings, path: str) -> str:
    """The `tokenizers` pipeline of `SentencePieceTokenizer.encode` (see the module docstring)."""
    # pylint: disable=import-outside-toplevel  (only the HuggingFace export needs `tokenizers`)
    from tokenizers import (
        AddedToken,
        Regex,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )
    from tokenizers import Tokenizer as HFTokenizer

    spec = ModelFile.parse(model_proto)
    if not spec.unigram:
        raise ValueError(f"SentencePiece model {path} is not a unigram model (ALBERT's, SPEC "
                         "2.1); the HuggingFace export writes a tokenizer.json for unigram "
                         "models only")
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model_proto)
    # A digit-comma piece 100 below its score, as HuggingFace's AlbertConverter does: the model
    # then cuts "0," as "0" "," wherever it can, which is what HuggingFace's digit-comma rule
    # (data.comma_rule=hf, SPEC 2.3) gives in all but rare cases; a pipeline cannot re-encode
    # a piece after the model has chosen it, as the rule does. SentencePiece never cuts a
    # control, unknown or byte piece (<pad>, [MASK], <0xE0>) out of text as it is spelled; the
    # `tokenizers` model would, so they too score 100 below the lowest normal piece.
    reserved_score = min(processor.get_score(i) for i in range(processor.get_piece_size())
                         if not _reserved(processor, i)) - 100
    vocab = []
    for piece_id in range(processor.get_piece_size()):
        piece = processor.id_to_piece(piece_id)
        if _reserved(processor, piece_id):
            vocab.append((piece, reserved_score))
        else:
            vocab.append((piece, processor.get_score(piece_id) - 100 * needs_comma_split(piece)))
    # A model trained with byte_fallback spells a character it lacks in its <0xNN> pieces, as
    # `tokenizers` does with byte_fallback (and decodes them back to the character).
    byte_fallback = any(processor.is_byte(i) for i in range(processor.get_piece_size()))
    model = HFTokenizer(models.Unigram(vocab, unk_id=processor.unk_id(),
                                       byte_fallback=byte_fallback))
    whitespace, combining = _python_classes()
    steps = [normalizers.Replace(Regex(f"{whitespace}+"), " "), normalizers.Strip()]
    if not settings.keep_accents:
        steps += [normalizers.NFKD(), normalizers.Replace(Regex(combining), "")]
    if settings.do_lower_case:  # Python's lower() of the whole text: a final capital Σ is "ς"
        steps += [normalizers.Replace(Regex(wordpiece.HF_FINAL_SIGMA), "\u03c2"),
                  normalizers.Lowercase()]
    if "nfkc" in spec.normalization:
        # NFC first, which NFKC includes: `tokenizers` looks a grapheme of 6 bytes or more up
        # in the map character by character, so the Hangul jamo of NFKD's output would not be
        # recomposed, as SentencePiece recomposes them.
        steps.append(normalizers.NFC())
    if spec.charsmap:
        steps.append(normalizers.Precompiled(spec.charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(" {2,}"), " "), normalizers.Replace(Regex("^ | $"), "")]
    model.normalizer = normalizers.Sequence(steps)
    scheme = "always" if spec.add_dummy_prefix else "never"
    model.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE,
                                                   prepend_scheme=scheme)
    model.decoder = decoders.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme=scheme)
    if byte_fallback:
        model.decoder = decoders.Sequence([decoders.ByteFallback(), model.decoder])
    model.add_special_tokens([AddedToken(piece, special=True, normalized=False)
                              for piece in (PAD, UNK, CLS, SEP, MASK)])
    model.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, processor.piece_to_id(CLS)), (SEP, processor.piece_to_id(SEP))])
    return model.to_str(pretty=True)


def huggingface_files(model_proto: bytes, settings: TextSettings, *, model_max_length: int,
                      path: str = "<bytes>") -> dict[str, bytes]:
    """{file name: content} of a transformers ALBERT tokenizer folder that gives the ids of
    `SentencePieceTokenizer(model_proto, settings=settings).encode` (see the module docstring):
    spiece.model, tokenizer.json, tokenizer_config.json, special_tokens_map.json."""
    names = {"bos_token": CLS, "eos_token": SEP, "unk_token": UNK, "sep_token": SEP,
             "pad_token": PAD, "cls_token": CLS, "mask_token": MASK}
    # remove_space True: preprocess_text always folds whitespace (SPEC 2.2); the casing and the
    # accents are the run's. split_special_tokens False (transformers' default, written for a
    # server that reads signature.json): a special token spelled in a text is that token.
    config = dict(names, tokenizer_class="AlbertTokenizer", do_lower_case=settings.do_lower_case,
                  keep_accents=settings.keep_accents, remove_space=True,
                  model_max_length=model_max_length, split_special_tokens=False)
    return {HF_SPM_FILE: model_proto,
            "tokenizer.json": _tokenizer_json(model_proto, settings, path).encode("utf-8"),
            "tokenizer_config.json": (json.dumps(config, indent=2) + "\n").encode("utf-8"),
            "special_tokens_map.json": (json.dumps(names, indent=2) + "\n").encode("utf-8")}
