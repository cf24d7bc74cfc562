"""Python warnings raised during a command, said in the product's words or not at all.

numpy reports an overflow or an invalid value (``RuntimeWarning: overflow encountered in
cast``, ``invalid value encountered in matmul``) by printing a source line of whatever
module did the arithmetic: noise under ``-q``, and meaningless to someone who never saw
reprobuild's code. The fact behind it can matter (a float16 engine fed values above 65504
returns inf or NaN), so it is kept as one ``warning:`` line that says what it means for the
user; other library warnings (deprecations and the like) are for developers and dropped.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def numeric_warnings(echo: Callable[..., None]) -> Iterator[None]:
    """Record every warning while the command runs; afterwards (also on failure) print one
    line when any was numeric (a ``RuntimeWarning`` from arithmetic)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per place: a loop must not record millions
        try:
            yield
        finally:
            line = describe(caught)
            if line:
                with contextlib.suppress(OSError, ValueError):
                    echo(line, err=True)


def describe(caught: list[warnings.WarningMessage]) -> str | None:
    """The one line for the numeric warnings among ``caught``; None when there were none."""
    numeric = [
        str(w.message)
        for w in caught
        if issubclass(w.category, RuntimeWarning) and "encountered" in str(w.message)
    ]
    if not numeric:
        return None
    kinds = sorted({m.split(" encountered")[0].strip() for m in numeric})
    words = " and ".join(_WORDS.get(k, k) for k in kinds)
    return (
        f"warning: the computation met {words}, so some results may be inf or NaN; check "
        "that the inputs are in the model's range (float16 holds at most 65504)"
    )


_WORDS = {
    "overflow": "values too large for their data type",
    "invalid value": "invalid operations (inf - inf, 0 x inf: NaN)",
    "divide by zero": "divisions by zero",
    "underflow": "values too small for their data type",
}
