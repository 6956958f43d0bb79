"""BERT WordPiece tokenization, as the reference's `FullTokenizer(vocab_file=...)` (SPEC 2.5).

  vocab = read_vocab(path, content)                      # pieces in id order, checked
  splitter = WordPieceSplitter(vocab, lower=True)
  ids, char_starts, char_ends = splitter.encode(text)    # ids and ORIGINAL character spans

The released Chinese ALBERT models carry a `vocab.txt` instead of a SentencePiece model; the
reference then runs `BasicTokenizer` (drop NUL, U+FFFD and control characters, whitespace to
" ", one token per CJK ideograph, split on whitespace; per token lower-case and strip accents
(NFD, drop Mn) when `do_lower_case`; split off every punctuation character) and then
`WordpieceTokenizer` (greedy longest match, "##" continuations, "[UNK]" for a word over 200
characters or one with no match). This is that algorithm, written to also record which original
characters every piece covers (SQuAD answers, token classification). HuggingFace's
`BertNormalizer` is not used: it differs from the reference on the Greek final sigma (it
lower-cases character by character), on CJK Extension E (U+2B820-U+2B91F, its table starts at
U+2B920), on private-use and unassigned characters (it drops every category C, the reference
only Cc and Cf), and cuts words at 100 characters.

`train_vocab` builds a vocabulary from sentences with HuggingFace `tokenizers`' WordPiece
trainer, on the words of this `BasicTokenizer`. `huggingface_files` writes the files with which
`transformers.AutoTokenizer` gives these same ids: a `tokenizer.json` whose pipeline spells the
reference's rules out (regular expressions for the cleaning, the final sigma and the CJK ranges,
200 characters a word); a special token spelled in a text ("[MASK]") is that token there, as in
transformers' own BERT tokenizers, where the reference splits it like any other characters.
"""
from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Iterable, Sequence

import numpy as np

from albert_jax.data.tokenizers.text_settings import TextSettings

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_PIECES = (PAD, UNK, CLS, SEP, MASK)  # BERT's order; a trained vocabulary starts so
REQUIRED_PIECES = (UNK, CLS, SEP, MASK)
CONTINUATION = "##"
MAX_WORD_CHARS = 200  # the reference's `max_input_chars_per_word`

_TRAIN_COMMAND = ("albert-jax tokenizer train --config=... --config.data.tokenizer_kind=wordpiece "
                  "--config.data.tokenizer=.../vocab.txt")


# --- The vocabulary ---------------------------------------------------------------------------

def read_vocab(path: str, content: bytes) -> list[str]:
    """The pieces of vocabulary file `content`, id = line number (the reference's `load_vocab`:
    a line's first whitespace-separated field, " " for a blank line).

    Raises ValueError, one line naming `path`, for a file that is not UTF-8 text, that lacks
    [UNK], [CLS], [SEP] or [MASK], or that repeats a piece (the reference would silently renumber
    every later piece, so the ids would no longer match the checkpoint's embedding rows).
    """
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"WordPiece vocabulary {path} is not UTF-8 text ({error.reason} at byte "
                         f"{error.start}); give a vocab.txt with one piece per line") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pieces = [line.strip().split()[0] if line.strip() else " " for line in lines]
    first_line: dict[str, int] = {}
    for number, piece in enumerate(pieces, start=1):
        if piece in first_line:
            raise ValueError(f"WordPiece vocabulary {path} repeats the piece {piece!r} (lines "
                             f"{first_line[piece]} and {number}); every piece must appear once")
        first_line[piece] = number
    missing = [piece for piece in REQUIRED_PIECES if piece not in first_line]
    if missing:
        raise ValueError(f"WordPiece vocabulary {path} has no {', '.join(missing)} piece; ALBERT "
                         f"needs {', '.join(REQUIRED_PIECES)} (SPEC 2.5); create one with "
                         f"`{_TRAIN_COMMAND}`")
    return pieces


def is_start_piece(piece: str) -> bool:
    """SPEC 2.5 `_is_start_piece_bert`: every piece but a "##" continuation starts a word."""
    return not piece.startswith(CONTINUATION)


# --- BasicTokenizer ---------------------------------------------------------------------------

# What the reference's `_clean_text`, `_tokenize_chinese_chars` and `whitespace_tokenize` make of
# one original character.
_DROP, _SPACE, _IDEOGRAPH, _WORD = range(4)
# Characters other than these are, in ASCII, punctuation (the reference's `_is_punctuation`
# takes every non-letter, non-digit printable ASCII character).
_ASCII_DROPPED = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f"  # Cc but \t \n \r
_ASCII_PUNCTUATION = "!-/:-@\\[-`{-~"
_ASCII_WORDS = re.compile(f"[A-Za-z0-9{_ASCII_DROPPED}]+|[{_ASCII_PUNCTUATION}]")
_ASCII_DROP = re.compile(f"[{_ASCII_DROPPED}]")


# The reference's `_is_chinese_char`: the CJK Unified Ideographs blocks (not Hangul or Kana).
_IDEOGRAPH_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                     (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_ideograph(code: int) -> bool:
    return any(low <= code <= high for low, high in _IDEOGRAPH_RANGES)


@functools.lru_cache(maxsize=65536)
def _char_class(char: str) -> int:
    code = ord(char)
    category = unicodedata.category(char)
    # `_is_control`: Cc and Cf, except \t \n \r (whitespace there).
    if code == 0 or code == 0xFFFD or (category in ("Cc", "Cf") and char not in "\t\n\r"):
        return _DROP
    # `_is_whitespace` (" ", \t, \n, \r, Zs) becomes " "; str.split() also splits at the other
    # whitespace that survives the cleaning (U+2028, U+2029).
    if char.isspace():
        return _SPACE
    return _IDEOGRAPH if _is_ideograph(code) else _WORD


@functools.lru_cache(maxsize=65536)
def _is_punctuation(char: str) -> bool:
    """The reference's `_is_punctuation`: non-alphanumeric printable ASCII or a category P."""
    code = ord(char)
    return (33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126
            or unicodedata.category(char).startswith("P"))


def _strip_accents(text: str) -> str:
    """The reference's `_run_strip_accents`: NFD, then drop the nonspacing marks (Mn)."""
    return "".join(char for char in unicodedata.normalize("NFD", text)
                   if unicodedata.category(char) != "Mn")


@functools.lru_cache(maxsize=65536)
def _normalized_char(char: str, keep_accents: bool) -> str:
    return char.lower() if keep_accents else _strip_accents(char.lower())


def _raw_words(text: str) -> list[tuple[str, list[int]]]:
    """The whitespace tokens of the cleaned text with CJK ideographs spaced out, each with the
    index in `text` of each of its characters."""
    words: list[tuple[str, list[int]]] = []
    if text.isascii():  # Fast path: ASCII has no ideographs and nothing to normalise but case.
        for match in _ASCII_WORDS.finditer(text):
            word, start = match.group(), match.start()
            if _ASCII_DROP.search(word) is None:
                words.append((word, list(range(start, match.end()))))
            else:
                kept = [(char, start + i) for i, char in enumerate(word)
                        if not _ASCII_DROP.match(char)]
                if kept:
                    words.append(("".join(char for char, _ in kept), [i for _, i in kept]))
        return words
    chars: list[str] = []
    origins: list[int] = []
    for index, char in enumerate(text):
        kind = _char_class(char)
        if kind == _DROP:
            continue
        if kind == _WORD:
            chars.append(char)
            origins.append(index)
            continue
        if chars:
            words.append(("".join(chars), origins))
            chars, origins = [], []
        if kind == _IDEOGRAPH:
            words.append((char, [index]))
    if chars:
        words.append(("".join(chars), origins))
    return words


def _normalize(word: str, origins: list[int], lower: bool,
               keep_accents: bool) -> tuple[str, list[int]]:
    """`word` lower-cased and stripped of accents as the reference does it (on the whole token:
    Python's lower() gives a final sigma), with the origin of every character (per character:
    NFD and lower() keep every character's part in place, so the lengths agree). keep_accents:
    lower-cased only (HuggingFace BertTokenizer's strip_accents=False)."""
    if not lower:
        return word, origins
    normalized = word.lower() if keep_accents else _strip_accents(word.lower())
    parts = [_normalized_char(char, keep_accents) for char in word]
    char_origins = [origin for part, origin in zip(parts, origins) for _ in part]
    if len(char_origins) != len(normalized):  # not seen; keep the ids, cover the whole word
        char_origins = [origins[0]] * len(normalized)
    return normalized, char_origins


def _split_punctuation(word: str, origins: list[int]) -> list[tuple[str, list[int]]]:
    """The reference's `_run_split_on_punc` plus its final `whitespace_tokenize`."""
    tokens: list[tuple[str, list[int]]] = []
    start = 0
    for index, char in enumerate(word):
        if _is_punctuation(char) or char.isspace():
            if start < index:
                tokens.append((word[start:index], origins[start:index]))
            if not char.isspace():
                tokens.append((char, origins[index:index + 1]))
            start = index + 1
    if start < len(word):
        tokens.append((word[start:], origins[start:]))
    return tokens


def basic_tokenize(text: str, lower: bool,
                   keep_accents: bool = False) -> list[tuple[str, list[int]]]:
    """The reference's `BasicTokenizer(do_lower_case=lower).tokenize(text)`, each token with the
    index in `text` of the original character each of its characters comes from; keep_accents:
    lower-casing does not strip accents (HuggingFace's strip_accents=False)."""
    tokens = []
    for word, origins in _raw_words(text):
        if word.isascii() and word.isalnum():  # nothing to split, only ASCII case to fold
            tokens.append((word.lower() if lower else word, origins))
            continue
        tokens.extend(_split_punctuation(*_normalize(word, origins, lower, keep_accents)))
    return tokens


# --- WordpieceTokenizer -----------------------------------------------------------------------

class WordPieceSplitter:
    """`BasicTokenizer` then `WordpieceTokenizer` over the pieces of one vocabulary.

    Attributes:
      vocab: {piece: id}; unk_id: the id of "[UNK]"; lower: `do_lower_case`; keep_accents:
        lower-casing keeps accents.
    """

    def __init__(self, pieces: Sequence[str], *, lower: bool, keep_accents: bool = False):
        self.vocab = {piece: index for index, piece in enumerate(pieces)}
        self.unk_id = self.vocab[UNK]
        self.lower = lower
        self.keep_accents = keep_accents
        self._longest = max(len(piece) for piece in pieces)
        self._cache: dict[str, list[tuple[int, int, int]]] = {}

    def _word_pieces(self, word: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of the pieces of one basic token: greedy longest match first, "##"
        before every piece but the first; one [UNK] for the whole word when it is over 200
        characters or some part of it matches no piece."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        pieces: list[tuple[int, int, int]] = []
        if len(word) <= MAX_WORD_CHARS:
            start = 0
            while start < len(word):
                # A piece is at most `_longest` characters, so longer candidates need no lookup.
                end = min(len(word), start + self._longest)
                while end > start:
                    piece_id = self.vocab.get(word[start:end] if start == 0
                                              else CONTINUATION + word[start:end])
                    if piece_id is not None:
                        break
                    end -= 1
                if end == start:
                    pieces = []
                    break
                assert piece_id is not None  # the lookup that stopped the loop found it
                pieces.append((piece_id, start, end))
                start = end
        result = pieces or [(self.unk_id, 0, len(word))]
        if len(self._cache) < 1_000_000:
            self._cache[word] = result
        return result

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Ids of `FullTokenizer.tokenize(text)` + `convert_tokens_to_ids` and the characters of
        the ORIGINAL `text` each piece covers: (ids, char_starts, char_ends), int32 [pieces].

        A piece covers text[char_starts:char_ends], from the original character of its first
        character to that of its last; an [UNK] covers its whole word.
        """
        ids, starts, ends = [], [], []
        for word, origins in basic_tokenize(text, self.lower, self.keep_accents):
            for piece_id, start, end in self._word_pieces(word):
                ids.append(piece_id)
                starts.append(origins[start])
                ends.append(origins[end - 1] + 1)
        return (np.asarray(ids, dtype=np.int32), np.asarray(starts, dtype=np.int32),
                np.asarray(ends, dtype=np.int32))


# --- Training ---------------------------------------------------------------------------------

def train_vocab(sentences: Iterable[str], vocab_size: int, *, lower: bool,
                keep_accents: bool = False) -> list[str]:
    """A WordPiece vocabulary of exactly `vocab_size` pieces from `sentences`: [PAD] [UNK] [CLS]
    [SEP] [MASK] (ids 0-4, BERT's order), then what HuggingFace `tokenizers`' WordPiece trainer
    learns from the words of `BasicTokenizer` (so training and tokenizing see the same words);
    "[unused<i>]" pieces fill it up to `vocab_size` when the corpus has fewer (as BERT's
    vocabularies keep spare rows), so the model's embedding always matches the file."""
    # pylint: disable=import-outside-toplevel  (only `tokenizer train` needs `tokenizers`)
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, pre_tokenizers, trainers

    if vocab_size < len(SPECIAL_PIECES) + 1:
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside "
                         f"{', '.join(SPECIAL_PIECES)}; use a larger vocab_size")
    model = HFTokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix=CONTINUATION,
                                         max_input_chars_per_word=MAX_WORD_CHARS))
    model.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_PIECES),
        continuing_subword_prefix=CONTINUATION, show_progress=False)

    def words() -> Iterable[str]:
        for sentence in sentences:
            tokens = basic_tokenize(sentence, lower, keep_accents)
            if tokens:
                yield " ".join(word for word, _ in tokens)

    model.train_from_iterator(words(), trainer)
    vocab = model.get_vocab()
    pieces = sorted(vocab, key=vocab.__getitem__)[:vocab_size]
    spare = (f"[unused{index}]" for index in range(vocab_size))
    pieces += [piece for piece in spare if piece not in vocab][:vocab_size - len(pieces)]
    return pieces


# --- HuggingFace transformers -----------------------------------------------------------------

# Onig regular expressions (what `tokenizers` runs) for the rules of `_char_class` and
# `_is_punctuation`, and for Python's final sigma: a capital sigma after a cased letter (with up
# to two case-ignorable characters between) and before no cased letter becomes "ς" when lower().
_HF_DROPPED = r"[[\x{0}\x{FFFD}\p{Cc}\p{Cf}]&&[^\t\n\r]]"
HF_FINAL_SIGMA = (r"(?<=\p{Cased}|\p{Cased}\p{Case_Ignorable}|\p{Cased}\p{Case_Ignorable}{2})"
                   r"\x{3A3}(?!\p{Case_Ignorable}*\p{Cased})")
_HF_IDEOGRAPHS = "[" + "".join(f"\\x{{{low:X}}}-\\x{{{high:X}}}"
                                for low, high in _IDEOGRAPH_RANGES) + "]"
_HF_PUNCTUATION = r"[!-/:-@\[-`{-~\p{P}]"


def huggingface_files(pieces: Sequence[str], settings: TextSettings, *,
                      model_max_length: int) -> dict[str, bytes]:
    """{file name: content} of a transformers `BertTokenizerFast` (what `AutoTokenizer` opens)
    that tokenizes as `WordPieceSplitter(pieces, lower=settings.do_lower_case,
    keep_accents=settings.keep_accents)` (lower-casing that keeps the Mn marks is BertTokenizer's
    strip_accents=False) and adds [CLS] A [SEP] B [SEP] with segment ids 0 and 1: vocab.txt,
    tokenizer.json, tokenizer_config.json, special_tokens_map.json."""
    # pylint: disable=import-outside-toplevel  (only the HuggingFace export needs `tokenizers`)
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer

    vocab = {piece: index for index, piece in enumerate(pieces)}
    model = HFTokenizer(models.WordPiece(vocab, unk_token=UNK,
                                         continuing_subword_prefix=CONTINUATION,
                                         max_input_chars_per_word=MAX_WORD_CHARS))
    steps = [normalizers.Replace(Regex(_HF_DROPPED), "")]
    if settings.do_lower_case:  # the reference's order: lower(), then NFD and drop the Mn marks
        steps += [normalizers.Replace(Regex(HF_FINAL_SIGMA), "\u03c2"), normalizers.Lowercase()]
        if not settings.keep_accents:
            steps += [normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}"), "")]
    model.normalizer = normalizers.Sequence(steps)
    model.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(_HF_IDEOGRAPHS), "isolated"),
        pre_tokenizers.Split(Regex(_HF_PUNCTUATION), "isolated")])
    model.decoder = decoders.WordPiece(prefix=CONTINUATION)
    specials = [piece for piece in SPECIAL_PIECES if piece in vocab]
    model.add_special_tokens(specials)
    model.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])])
    names = {"unk_token": UNK, "sep_token": SEP, "cls_token": CLS, "mask_token": MASK}
    if PAD in vocab:
        names["pad_token"] = PAD
    config = dict(names, tokenizer_class="BertTokenizer", do_lower_case=settings.do_lower_case,
                  tokenize_chinese_chars=True,
                  strip_accents=False if settings.keep_accents else None,
                  model_max_length=model_max_length, split_special_tokens=False)
    return {"vocab.txt": "".join(f"{piece}\n" for piece in pieces).encode("utf-8"),
            "tokenizer.json": model.to_str(pretty=True).encode("utf-8"),
            "tokenizer_config.json": (json.dumps(config, indent=2) + "\n").encode("utf-8"),
            "special_tokens_map.json": (json.dumps(names, indent=2) + "\n").encode("utf-8")}
