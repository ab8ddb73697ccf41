# SPDX-License-Identifier: MIT
"""Text in and out, when the checkpoint's tokenizer can be loaded.

kvmm.llm works on token ids. For text it uses the `tokenizers` package (tokenizer.json) or
`sentencepiece` (tokenizer.model) when one of them is importable; neither is a dependency.
load_tokenizer() returns None and why_no_tokenizer() says what is missing otherwise.
"""

from __future__ import annotations

import os
from typing import List, Optional

__all__ = ["load_tokenizer", "why_no_tokenizer", "Tokenizer"]

_why = ""


class Tokenizer:
    def __init__(self, encode, decode, kind: str):
        self._encode, self._decode, self.kind = encode, decode, kind

    def encode(self, text: str) -> List[int]:
        return list(self._encode(text))

    def decode(self, ids: List[int]) -> str:
        return self._decode(list(ids))


def load_tokenizer(directory: str) -> Optional[Tokenizer]:
    global _why
    tj = os.path.join(directory, "tokenizer.json")
    sp = os.path.join(directory, "tokenizer.model")
    missing = []
    if os.path.exists(tj):
        try:
            import tokenizers
        except ImportError:
            missing.append("tokenizers (for tokenizer.json)")
        else:
            t = tokenizers.Tokenizer.from_file(tj)
            return Tokenizer(lambda s: t.encode(s).ids, lambda ids: t.decode(ids), "tokenizers")
    if os.path.exists(sp):
        try:
            import sentencepiece
        except ImportError:
            missing.append("sentencepiece (for tokenizer.model)")
        else:
            p = sentencepiece.SentencePieceProcessor(model_file=sp)
            return Tokenizer(lambda s: p.encode(s), lambda ids: p.decode(ids), "sentencepiece")
    if missing:
        _why = "the Python package " + " and ".join(missing) + " is not importable"
    else:
        _why = f"{directory} has no tokenizer.json or tokenizer.model"
    return None


def why_no_tokenizer() -> str:
    return _why
