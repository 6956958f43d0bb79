"""Tokenizers with ALBERT's preprocessing: SentencePiece (`.model`, SPEC 2.1-2.4) or WordPiece
(`vocab.txt`, the Chinese models, SPEC 2.5), behind one interface: load, encode.

  tokenizer = Tokenizer.load("30k-clean.model")       # the released model works unchanged
  tokenizer = Tokenizer.load("vocab_chinese.txt")     # a BERT vocabulary: WordPiece
  ids = tokenizer.encode("Hello World, 1,000,")         # int32 [num_pieces]
  tokenizer.word_start                                  # bool [vocab_size], for n-gram masking
  ids, char_starts, char_ends = tokenizer.encode_with_offsets(text)  # exact character spans
  Tokenizer.load(path, TextSettings(comma_rule="hf"))   # HuggingFace's digit-comma rule (SPEC 2.3)

The file decides the kind (`tokenizer_kind`): a name ending in `.model` is a SentencePiece model,
any other a WordPiece vocabulary (UTF-8 text, one piece per line). A workdir keeps its tokenizer
as the model file or vocabulary plus its text settings beside it (`Tokenizer.files`,
text_settings.py), so `Tokenizer.load` of a workdir's copy gets the run's settings back.
Training a model or a vocabulary from a corpus is training.py's.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterable

import numpy as np
import sentencepiece as spm
from etils import epath
from sentencepiece import sentencepiece_pb2

from albert_jax.data.tokenizers import wordpiece
from albert_jax.data.tokenizers.preprocessing import (
    SPIECE_UNDERLINE,
    is_start_piece,
    needs_comma_split,
    preprocess_text,
    preprocess_with_origins,
)
from albert_jax.data.tokenizers.text_settings import TextSettings, record_path

# SPEC 2.1: the ids and symbols of the released `30k-clean.model`.
PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
CONTROL_SYMBOLS = (CLS, SEP, MASK)
# User-defined symbols of the released model: ( ) " - . – £ € (en dash, pound, euro).
USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")

_TRAIN_COMMAND = "albert-jax tokenizer train --config=..."
HF_SPM_FILE = "spiece.model"  # the file transformers' AlbertTokenizer reads
_MODEL_SUFFIX = ".model"


def tokenizer_kind(path: str, content: bytes) -> str:
    """"sentencepiece" for a `.model` file, "wordpiece" for a vocabulary (any other name).

    Raises ValueError, one line naming `path`, when the name and the content disagree: a
    `.model` that holds text (a vocabulary), or another name that holds a binary file (a
    SentencePiece model, which always has NUL bytes in its scores).
    """
    is_text = b"\x00" not in content
    if os.fspath(path).endswith(_MODEL_SUFFIX):
        if is_text and content:
            raise ValueError(
                f"{path} is named as a SentencePiece model (.model) but holds text, like a "
                "WordPiece vocabulary; rename it (e.g. vocab.txt) to use it as a vocabulary")
        return "sentencepiece"
    if not is_text:
        raise ValueError(
            f"{path} is a binary file (a SentencePiece model?), not a WordPiece vocabulary "
            f"(UTF-8 text, one piece per line); a SentencePiece model must end in "
            f"{_MODEL_SUFFIX}")
    return "wordpiece"


class Tokenizer:
    """What the data, the tasks and the workdir need of a tokenizer; `Tokenizer.load` gives a
    `SentencePieceTokenizer` or a `WordPieceTokenizer` as the file is (`tokenizer_kind`).

    Attributes:
      kind: "sentencepiece" or "wordpiece".
      path: where it was read from.
      vocab_size: number of pieces (30000 for `30k-clean.model`, 21128 for the Chinese models).
      pad_id, unk_id, cls_id, sep_id, mask_id: the ids the data and the tasks write.
      word_start: bool [vocab_size], does each piece start a word (SPEC 1.4.2 / 2.5, under
        settings.word_boundaries), for whole-word n-gram masking.
      settings: the text settings it tokenizes with (lower-casing, accents, the digit-comma
        rule, word boundaries; its `kind` is the file's).
    """
    kind: str
    path: str
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    word_start: np.ndarray
    settings: TextSettings

    @staticmethod
    def load(path: str, settings: TextSettings | None = None) -> "Tokenizer":
        """Loads a `.model` file or a vocabulary (local or any path etils.epath reads, e.g.
        gs://) with `settings`; None: the settings recorded beside the model
        (`TextSettings.recorded`), else the defaults. The file decides the kind.
        """
        file = epath.Path(path)
        if not file.exists():
            raise FileNotFoundError(
                f"tokenizer {path} does not exist; create one with `{_TRAIN_COMMAND}` (it writes "
                f"config.data.tokenizer) or point config.data.tokenizer at e.g. 30k-clean.model "
                f"or a BERT vocab.txt")
        if settings is None:
            settings = TextSettings.recorded(os.fspath(path), TextSettings())
        return Tokenizer.from_bytes(file.read_bytes(), path=os.fspath(path), settings=settings)

    @staticmethod
    def from_bytes(content: bytes, *, path: str,
                   settings: TextSettings = TextSettings()) -> "Tokenizer":
        """The tokenizer in `content`, of the kind `path` names (`tokenizer_kind`)."""
        if tokenizer_kind(path, content) == "wordpiece":
            return WordPieceTokenizer(content, settings=settings, path=path)
        return SentencePieceTokenizer(content, settings=settings, path=path)

    def files(self, name: str) -> dict[str, bytes]:
        """{file name: content} that keep this tokenizer in a workdir as `name`, which
        `Tokenizer.load(<workdir>/name)` reads back."""
        raise NotImplementedError

    def preprocess(self, text: str) -> str:
        """What the reference's data processors do to a text before tokenizing it (RACE joins a
        question and an option after it)."""
        raise NotImplementedError

    def pieces(self, text: str) -> list[str]:
        """The pieces of `text`, as the reference's `FullTokenizer.tokenize`."""
        raise NotImplementedError

    def encode(self, text: str) -> np.ndarray:
        """Token ids of one text, int32 [num_pieces] (no [CLS] or [SEP] added)."""
        raise NotImplementedError

    def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, char_starts, char_ends), int32 [num_pieces]: ids equal `encode(text)`; token t
        covers text[char_starts[t]:char_ends[t]] of the ORIGINAL text."""
        raise NotImplementedError

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; the special pieces decode to nothing."""
        raise NotImplementedError

    def bare_piece(self, piece: str) -> tuple[bool, str]:
        """Whether `piece` begins a new word in the text (a space before it) and its text
        without the word marker, for showing pieces to a person (`albert-jax data inspect`)."""
        raise NotImplementedError


class SentencePieceTokenizer(Tokenizer):
    """A loaded SentencePiece model plus the ALBERT conventions around it (SPEC 2.1-2.4)."""
    kind = "sentencepiece"

    def __init__(self, model_proto: bytes, *, settings: TextSettings = TextSettings(),
                 path: str = "<bytes>"):
        settings.check()
        self._model_proto = model_proto
        self.path = path
        self.settings = dataclasses.replace(settings, kind=self.kind)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except (RuntimeError, OSError) as error:
            raise ValueError(
                f"{path} is not a valid SentencePiece model ({error}); create one with "
                f"`{_TRAIN_COMMAND}`") from None
        self.vocab_size = int(self._sp.get_piece_size())
        ids = {}
        for piece in (PAD, UNK, CLS, SEP, MASK):
            piece_id = self._sp.piece_to_id(piece)
            if self._sp.id_to_piece(piece_id) != piece:
                raise ValueError(
                    f"SentencePiece model {path} has no {piece!r} piece; ALBERT needs <pad>, "
                    f"<unk>, [CLS], [SEP], [MASK] (SPEC 2.1); create one with `{_TRAIN_COMMAND}`")
            ids[piece] = int(piece_id)
        # SPEC 2.1: the data pads with 0 (SPEC 1.5) and checkpoints assume the released ids.
        if list(ids.values()) != list(range(len(ids))):
            found = ", ".join(f"{piece} {piece_id}" for piece, piece_id in ids.items())
            raise ValueError(
                f"SentencePiece model {path} has {found}; ALBERT needs <pad> 0, <unk> 1, [CLS] 2, "
                f"[SEP] 3, [MASK] 4 (SPEC 2.1); create one with `{_TRAIN_COMMAND}`")
        self.pad_id, self.unk_id = ids[PAD], ids[UNK]
        self.cls_id, self.sep_id, self.mask_id = ids[CLS], ids[SEP], ids[MASK]
        pieces = [self._sp.id_to_piece(i) for i in range(self.vocab_size)]
        self.word_start = self.word_starts(self.settings.word_boundaries)
        # Pieces the SPEC 2.3 digit-comma rule re-encodes; `encode` takes the slow path only then.
        self._comma_split = np.array([needs_comma_split(piece) for piece in pieces], dtype=bool)

    def word_starts(self, word_boundaries: str) -> np.ndarray:
        """bool [vocab_size]: does each piece start a whole word under `word_boundaries`
        (`is_start_piece`)? "reference" is SPEC 1.4.2 exactly, piece text alone. "spaces" also
        makes the control and unknown pieces starts, and the byte pieces (`<0xE0>`, byte_fallback)
        continuations: they spell a character the vocabulary lacks, after the "▁" or the piece
        it follows in its word."""
        starts = []
        for piece_id in range(self.vocab_size):
            piece = self._sp.id_to_piece(piece_id)
            if word_boundaries == "reference":
                starts.append(is_start_piece(piece))
            elif self._sp.is_control(piece_id) or self._sp.is_unknown(piece_id):
                starts.append(True)
            else:
                starts.append(not self._sp.is_byte(piece_id)
                              and is_start_piece(piece, word_boundaries))
        return np.array(starts, dtype=bool)

    def files(self, name: str) -> dict[str, bytes]:
        """The model and its text settings (`TextSettings.record`)."""
        return {name: self._model_proto, record_path(name): self.settings.record()}

    def __getstate__(self) -> dict:  # Picklable for worker processes: ship the model bytes.
        return {"model_proto": self._model_proto, "settings": self.settings, "path": self.path}

    def __setstate__(self, state: dict) -> None:
        SentencePieceTokenizer.__init__(self, state["model_proto"], settings=state["settings"],
                                        path=state["path"])

    def preprocess(self, text: str) -> str:
        """SPEC 2.2, the accent step skipped with keep_accents."""
        return preprocess_text(text, self.settings.do_lower_case, self.settings.keep_accents)

    def bare_piece(self, piece: str) -> tuple[bool, str]:
        # (the lone "▁" piece stays visible)
        return piece.startswith(SPIECE_UNDERLINE), piece.lstrip(SPIECE_UNDERLINE) or piece

    def pieces(self, text: str) -> list[str]:
        """The pieces of `text` after preprocessing and the SPEC 2.3 digit-comma rule.

        A piece ending in digit + "," is re-encoded without its comma (and any "▁"), the
        re-encoded pieces are NOT split again, and "," follows as its own piece. SentencePiece
        puts a "▁" in front of the re-encoded text. comma_rule "reference" keeps it, as the
        reference does under Python 3 (its `SPIECE_UNDERLINE` is bytes, so the test that would
        remove it never holds): with "0," in the vocabulary "x0," -> ["▁x", "▁", "0", ","].
        comma_rule "hf" removes it when the original piece did not start a word, as Python 2 and
        HuggingFace's AlbertTokenizer do: "x0," -> ["▁x", "0", ","].
        """
        new_pieces = []
        for piece in self._sp.encode(self.preprocess(text), out_type=str):
            if not needs_comma_split(piece):
                new_pieces.append(piece)
                continue
            sub_pieces = self._sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
            new_pieces.extend(sub_piece for sub_piece, _, _ in self._apply_comma_rule(
                piece, [(sub_piece, 0, 0) for sub_piece in sub_pieces]))
            new_pieces.append(piece[-1])
        return new_pieces

    def _apply_comma_rule(self, piece: str, sub_pieces: list[tuple[str, int, int]]
                          ) -> list[tuple[str, int, int]]:
        """(sub-piece, begin, end) of re-encoded digit-comma `piece` (without its comma) under
        `comma_rule` (see `pieces`): "hf" drops the "▁" re-encoding added to a piece that did
        not start a word (the whole first sub-piece when it is "▁" alone)."""
        if self.settings.comma_rule == "reference" or piece[0] == SPIECE_UNDERLINE or not sub_pieces:
            return sub_pieces
        (first, begin, end), rest = sub_pieces[0], sub_pieces[1:]
        if first[0] != SPIECE_UNDERLINE:
            return sub_pieces
        return rest if len(first) == 1 else [(first[1:], begin, end)] + rest

    def encode(self, text: str) -> np.ndarray:
        """Token ids of one sentence, int32 [num_pieces]; same pieces as `pieces(text)`."""
        ids = np.asarray(self._sp.encode(self.preprocess(text)), dtype=np.int32)
        if not ids.size:
            return ids
        # An unknown piece maps to unk_id whatever its text (which may end in a digit and a
        # comma): a text with <unk> takes the exact path, through the pieces' texts.
        if (ids == self.unk_id).any():
            return np.asarray([self._sp.piece_to_id(piece) for piece in self.pieces(text)],
                              dtype=np.int32)
        if not self._comma_split[ids].any():
            return ids
        # Only the digit-comma pieces change (`pieces`: re-encoded, then the comma).
        new_ids = []
        for piece_id in ids.tolist():
            if not self._comma_split[piece_id]:
                new_ids.append(piece_id)
                continue
            piece = self._sp.id_to_piece(piece_id)
            sub_pieces = self._sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
            new_ids.extend(self._sp.piece_to_id(sub_piece) for sub_piece, _, _ in
                           self._apply_comma_rule(piece, [(sub, 0, 0) for sub in sub_pieces]))
            new_ids.append(self._sp.piece_to_id(piece[-1]))
        return np.asarray(new_ids, dtype=np.int32)

    def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token ids of `text` and the characters of the ORIGINAL `text` each token covers.

        Returns (ids, char_starts, char_ends), int32 [num_pieces]: ids equal `encode(text)`;
        token t covers text[char_starts[t]:char_ends[t]], from its first to its last non-space
        character (a lone "▁" covers nothing: char_starts == char_ends, where the next word
        starts).

        Exact, with no detokenising: two maps are composed, original -> preprocessed (SPEC 2.2
        applied character by character, recording where every preprocessed character comes
        from) and preprocessed -> pieces (SentencePiece's own offsets of every piece in its
        input, after its NFKC normalisation), with the SPEC 2.3 digit-comma rule as in `pieces`
        (the "▁" that comma_rule "reference" keeps covers nothing).
        """
        preprocessed, origins = preprocess_with_origins(text, self.settings.do_lower_case,
                                                        self.settings.keep_accents)
        spans = self._pieces_with_spans(preprocessed)
        ids = np.asarray([self._sp.piece_to_id(piece) for piece, _, _ in spans], dtype=np.int32)
        if not np.array_equal(ids, self.encode(text)):
            raise RuntimeError(f"the pieces with offsets of {text[:50]!r}... differ from "
                               "Tokenizer.encode; please report this text")
        is_space = np.frombuffer(preprocessed.encode("utf-32-le"), dtype=np.uint32) == ord(" ")
        # Index of the next / previous non-space character at or after / before each position.
        positions = np.arange(len(preprocessed))
        next_word = np.minimum.accumulate(
            np.where(is_space, len(preprocessed), positions)[::-1])[::-1]
        prev_word = np.maximum.accumulate(np.where(is_space, -1, positions))
        origins_end = np.append(origins, len(text))  # origin of "one past the end"
        next_word = np.append(next_word, len(preprocessed))
        char_starts = np.empty(len(spans), dtype=np.int32)
        char_ends = np.empty(len(spans), dtype=np.int32)
        for token, (_, begin, end) in enumerate(spans):
            first = next_word[begin]
            if first < end:
                char_starts[token] = origins[first]
                char_ends[token] = origins[prev_word[end - 1]] + 1
            else:  # No character but spaces: zero width, where the next word starts.
                char_starts[token] = char_ends[token] = origins_end[first]
        return ids, char_starts, char_ends

    def _encode_spans(self, text: str) -> list[tuple[str, int, int]]:
        """SentencePiece pieces of `text` (already preprocessed) as (piece, begin, end) with
        character offsets into `text`. SentencePiece reports byte offsets into its input."""
        proto = sentencepiece_pb2.SentencePieceText.FromString(  # type: ignore[attr-defined]  # built at import
            self._sp.encode(text, out_type="serialized_proto"))
        byte_starts = np.cumsum([0] + [len(char.encode("utf-8")) for char in text])
        spans = []
        for piece in proto.pieces:
            begin, end = np.searchsorted(byte_starts, [piece.begin, piece.end])
            spans.append((piece.piece, int(begin), int(end)))
        # A character that the model's NFKC makes several pieces of (Thai "ำ" -> "ํ" "า", "½"
        # -> bytes of "1⁄2", where keep_accents leaves it to the model) gives its span to the
        # last of them: the ones before cover it too (a lone "▁" still covers nothing).
        for index in range(len(spans) - 2, -1, -1):
            piece, begin, end = spans[index]
            if begin == end and piece != SPIECE_UNDERLINE and spans[index + 1][1] == begin:
                spans[index] = (piece, begin, spans[index + 1][2])
        return spans

    def _pieces_with_spans(self, text: str) -> list[tuple[str, int, int]]:
        """(piece, begin, end) of the pieces of `pieces` for preprocessed `text`, with the
        SPEC 2.3 digit-comma rule applied as there."""
        result = []
        for piece, begin, end in self._encode_spans(text):
            if not needs_comma_split(piece):
                result.append((piece, begin, end))
                continue
            sub_text = piece[:-1].replace(SPIECE_UNDERLINE, "")
            sub_pieces = self._apply_comma_rule(piece, self._encode_spans(sub_text))
            # The sub-pieces lie in the piece's text before its final comma.
            sub_base = end - 1 - len(sub_text)
            exact = text[sub_base:end - 1] == sub_text
            for sub_piece, sub_begin, sub_end in sub_pieces:
                if exact:
                    result.append((sub_piece, sub_base + sub_begin, sub_base + sub_end))
                else:  # SentencePiece changed these characters: cover the whole piece text.
                    result.append((sub_piece, begin, end - 1))
            result.append((piece[-1], end - 1, end))
        return result

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; control symbols ([CLS], [SEP], [MASK], <pad>) decode to nothing."""
        return self._sp.decode([int(i) for i in ids])


class WordPieceTokenizer(Tokenizer):
    """A BERT WordPiece vocabulary (`vocab.txt`) tokenized as the reference's
    `FullTokenizer(vocab_file=..., do_lower_case=lower)` (SPEC 2.5; wordpiece.py).

    pad_id is 0, what the reference pads `input_ids` with whatever the vocabulary (BERT's
    vocabularies have [PAD] there); the other special ids are those of [UNK], [CLS], [SEP],
    [MASK] in the file. A word starts at every piece but a "##" continuation, under either
    word_boundaries: BasicTokenizer already cuts words at spaces, punctuation and every CJK
    ideograph. keep_accents is BertTokenizer's strip_accents=False: lower-casing keeps accents.
    """
    kind = "wordpiece"

    def __init__(self, vocab: bytes, *, settings: TextSettings = TextSettings(),
                 path: str = "<bytes>"):
        self._vocab_bytes = vocab
        self.path = path
        self.settings = dataclasses.replace(settings, kind=self.kind)
        self._pieces = wordpiece.read_vocab(path, vocab)
        self._splitter = wordpiece.WordPieceSplitter(self._pieces, lower=settings.do_lower_case,
                                                    keep_accents=settings.keep_accents)
        ids = self._splitter.vocab
        self.vocab_size = len(self._pieces)
        self.pad_id, self.unk_id = 0, ids[wordpiece.UNK]
        self.cls_id, self.sep_id = ids[wordpiece.CLS], ids[wordpiece.SEP]
        self.mask_id = ids[wordpiece.MASK]
        self.word_start = np.array([wordpiece.is_start_piece(piece) for piece in self._pieces],
                                   dtype=bool)
        self._special = {self.pad_id, self.cls_id, self.sep_id, self.mask_id}

    def files(self, name: str) -> dict[str, bytes]:
        """The vocabulary file as read and its text settings (`TextSettings.record`)."""
        return {name: self._vocab_bytes, record_path(name): self.settings.record()}

    def __getstate__(self) -> dict:  # Picklable for worker processes: ship the vocabulary.
        return {"vocab": self._vocab_bytes, "settings": self.settings, "path": self.path}

    def __setstate__(self, state: dict) -> None:
        WordPieceTokenizer.__init__(self, state["vocab"], settings=state["settings"],
                                    path=state["path"])

    def preprocess(self, text: str) -> str:
        return text  # the reference's processors only convert a vocab_file model's text to str

    def pieces(self, text: str) -> list[str]:
        return self.id_to_piece(self.encode(text))

    def encode(self, text: str) -> np.ndarray:
        return self._splitter.encode(text)[0]

    def encode_with_offsets(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As `Tokenizer.encode_with_offsets`: each piece covers the original characters of its
        first to its last character (after the reference's cleaning, lower-casing and accent
        stripping, every character still knows where it came from); an [UNK] covers its word."""
        return self._splitter.encode(text)

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        return [self._pieces[int(i)] for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """The pieces joined, "##" continuations glued to the piece before; [PAD] (id 0), [CLS],
        [SEP], [MASK] decode to nothing."""
        words: list[str] = []
        for piece_id in ids:
            if int(piece_id) in self._special:
                continue
            is_start, text = self.bare_piece(self._pieces[int(piece_id)])
            if is_start or not words:
                words.append(text)
            else:
                words[-1] += text
        return " ".join(words)

    def bare_piece(self, piece: str) -> tuple[bool, str]:
        is_start = wordpiece.is_start_piece(piece)
        return is_start, piece if is_start else piece[len(wordpiece.CONTINUATION):]
