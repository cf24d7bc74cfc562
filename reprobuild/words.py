"""Counted nouns in messages: "1 layer", "2 layers".

One function, so every message that counts things agrees ("1 layers" reads as a bug and
makes a reader doubt the number too).
"""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural`` for irregular nouns)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
