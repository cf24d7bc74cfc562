"""``OPENBLAS_CORETYPE`` checked against the CPU before numpy loads OpenBLAS.

OpenBLAS runs the kernel family it is told to without asking the CPU: a family whose
kernels use AVX-512 on a CPU without it dies of SIGILL inside ``import numpy`` (exit 132,
no word, the lock's ``.lck`` left behind). The flags in ``/proc/cpuinfo`` say what the CPU
runs, so such a family is refused first. Light on purpose: no numpy, nothing that loads it.

The table holds what numpy's OpenBLAS (0.3.x, ``DYNAMIC_ARCH``) was seen to do on x86-64:
the family each ``OPENBLAS_CORETYPE`` runs (some names run another family's kernels, which
is the name the target then carries) and the instruction set those kernels need.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping

from reprobuild.errors import BackendUnavailable

FAMILIES: dict[str, tuple[str, str | None]] = {
    "skylakex": ("SkylakeX", "avx512f"),
    "cooperlake": ("SkylakeX", "avx512f"),
    "sapphirerapids": ("SkylakeX", "avx512f"),
    "haswell": ("Haswell", "avx2"),
    "zen": ("Haswell", "avx2"),
    "sandybridge": ("Sandybridge", "avx"),
    "bulldozer": ("Sandybridge", "avx"),
    "piledriver": ("Sandybridge", "avx"),
    "steamroller": ("Sandybridge", "avx"),
    "excavator": ("Sandybridge", "avx"),
    "nehalem": ("Nehalem", None),
    "atom": ("Nehalem", None),
    "barcelona": ("Nehalem", None),
    "katmai": ("Katmai", None),
    "prescott": ("Katmai", None),
    "core2": ("Katmai", None),
    "penryn": ("Katmai", None),
    "dunnington": ("Katmai", None),
}
"""lower-case ``OPENBLAS_CORETYPE`` -> (the kernel family it runs, the cpuinfo flag it needs)."""


def read_cpuinfo() -> str:
    """``/proc/cpuinfo``, or "" where there is none (then nothing is checked)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> set[str] | None:
    """The first processor's instruction-set flags; None when cpuinfo lists none."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return None


def named(coretype: str) -> str:
    """``OPENBLAS_CORETYPE=X``, with the family OpenBLAS runs for it where that is another
    name (the name the machine's target carries)."""
    family = FAMILIES.get(coretype.lower(), (coretype, None))[0]
    same = family.lower() == coretype.lower()
    return f"OPENBLAS_CORETYPE={coretype}" + ("" if same else f" (OpenBLAS's {family} kernels)")


def check_coretype(
    environ: Mapping[str, str], cpuinfo: str | None = None, machine: str | None = None
) -> str | None:
    """Refuse (exit 3) a kernel family this CPU cannot run; return a note when the family
    runs under another name, else None."""
    coretype = environ.get("OPENBLAS_CORETYPE", "").strip()
    if not coretype or (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return None
    family, needs = FAMILIES.get(coretype.lower(), (coretype, None))
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    if needs and flags is not None and needs not in flags:
        raise BackendUnavailable(
            f"{named(coretype)} needs {needs}, which this CPU lacks (/proc/cpuinfo flags), so "
            "OpenBLAS would die of an illegal instruction: unset OPENBLAS_CORETYPE or name a "
            "family this CPU runs"
        )
    if family.lower() != coretype.lower():
        return (
            f"{named(coretype)}: this machine's target names its kernel family "
            f"blas_kernels: {family}"
        )
    return None
