"""Every command the documentation shows runs, so an example that stops working fails here.

The pages are run as a reader would type them: each page's fenced ```sh blocks, and its
```python blocks, in order, by one ``bash`` in a fresh folder that holds a copy of the
bundled example models under ``reprobuild/examples/`` and the real TensorRT logs under
``tests/fixtures/trt-logs/`` (as in a clone), with ``reprobuild`` and ``python`` on PATH
from this test's interpreter. Each command must exit 0, unless its
line carries ``# exit N``. Other blocks (``text``, ``yaml``, ``json``) are output or files
and are not run; ```bash blocks are allowed only for the README's two set-up commands (they
install; ``.ci/run`` runs the second).

Two things differ from a user's machine, both installed by a ``sitecustomize`` in a folder
of this test's own (the product has no hook for them): the reference backend's timings are
injected (seeded, as ``tests/conftest.py`` does in-process), so no example depends on which
kernel won a race on a busy machine; and the pages in ``STANDIN_PAGES`` run under the
TensorRT stand-in (``tests/trt_standin``, installed as ``tests/test_trt_variants.py``
does), so their TensorRT commands run without a GPU, and the others without TensorRT even
where it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, INJECTED_SEED, ROOT, child_env

DOCS = ROOT / "docs"
TRT_LOGS = ROOT / "tests" / "fixtures" / "trt-logs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
STANDIN_PAGES = {"tensorrt.md"}
"""Pages whose commands need TensorRT: they run under the stand-in (auto picks it)."""

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
RUN_TAGS = {"sh", "python"}
SHOWN_TAGS = {"text", "yaml", "json", ""}
EXIT_MARK = re.compile(r"#\s*exit (\d+)\b")

SHIM = """\
# Written by tests/test_docs.py: injected reference timings and, where asked, the TensorRT
# stand-in, in every Python the documented commands start.
import sys

sys.path.insert(0, {root!r})
from reprobuild.backends.reference.knob import TimingKnob

_apply = TimingKnob.apply
_stand_in = TimingKnob("seed", seed={seed})


def _injected(self, key, names, costs):
    return _apply(self if self.active else _stand_in, key, names, costs)


if {injected!r}:
    TimingKnob.apply = _injected
if not {standin!r}:
    sys.modules["tensorrt"] = None  # auto picks reference, even where TensorRT is installed
else:
    from reprobuild.backends.tensorrt import cuda_probe
    from reprobuild.backends.tensorrt import device as device_mod
    from tests.test_trt_variants import A100
    from tests.trt_standin import make_module
    from tests.trt_standin.host_device import host_device

    module = make_module("10.13.3.9")
    sys.modules["tensorrt"] = module
    cuda_probe.probe_cuda = lambda: A100
    _device = host_device()
    device_mod.find_device = lambda: (_device, _device.how)
    module._test_device = _device
"""


def blocks(page: Path) -> list[tuple[str, str]]:
    """The page's fenced blocks as (tag, text), in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def commands(sh: str) -> list[str]:
    """A ```sh block split into whole commands: a line, with its ``\\`` continuations and,
    for compound commands (``for ... done``), the lines bash needs to finish it."""
    out: list[str] = []
    current: list[str] = []
    for line in sh.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current.append(line)
        text = "\n".join(current)
        if line.endswith("\\"):
            continue
        complete = subprocess.run(["bash", "-n", "-c", text], capture_output=True).returncode
        if complete == 0:
            out.append(text)
            current = []
    assert not current, f"unfinished command in a ```sh block: {current}"
    return out


def page_commands(page: Path) -> list[tuple[int, str, int]]:
    """The page's commands in order, each as (block number from 1 among the page's fenced
    blocks, command, the exit code the page documents: ``# exit N`` on its last line, else
    0)."""
    out = []
    for i, (tag, text) in enumerate(blocks(page), start=1):
        if tag == "sh":
            cmds = commands(text)
        elif tag == "python":
            cmds = [f"python - <<'__DOC_PY__'\n{text}__DOC_PY__"]
        else:
            continue
        for cmd in cmds:
            mark = EXIT_MARK.search(cmd.splitlines()[-1])
            out.append((i, cmd, int(mark.group(1)) if mark else 0))
    return out


MISMATCH = re.compile(r"^<<< command \[(\d+)\] exited (\d+), the page says (\d+)$", re.MULTILINE)
"""The line the script writes to stderr for a command whose exit code is not the page's."""


def script(page: Path, *, keep_going: bool = False) -> str:
    """One bash script that runs the page's commands in order, each checked for its exit
    code; a failure names the command (a :data:`MISMATCH` line) and stops, or with
    ``keep_going`` runs the rest too (to see every command that fails on a machine)."""
    lines = ["set -o pipefail"]
    stop = "" if keep_going else " exit 97;"
    for n, (_, cmd, want) in enumerate(page_commands(page), start=1):
        quoted = cmd.replace("'", "'\\''")
        lines += [
            f"echo \">>> $EPOCHREALTIME\" '[{n}] {quoted}' >&2",
            "{",
            cmd,
            "}",
            f"rc=$?; if [ $rc -ne {want} ]; then "
            f'echo "<<< command [{n}] exited $rc, the page says {want}" >&2;{stop} fi',
        ]
    return "\n".join(lines) + "\n"


def run_page(
    page: Path, tmp_path: Path, *, injected: bool = True, keep_going: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run the page's script in a fresh folder; ``injected=False`` keeps the reference
    backend's measured timings (what a reader's machine does); ``keep_going`` as in
    :func:`script`."""
    work, tools = tmp_path / "work", tmp_path / "tools"
    shutil.copytree(
        EXAMPLES, work / "reprobuild" / "examples", ignore=shutil.ignore_patterns("*.engine*")
    )
    shutil.copytree(TRT_LOGS, work / "tests" / "fixtures" / "trt-logs")
    (tools / "bin").mkdir(parents=True)
    standin = page.name in STANDIN_PAGES and page.parent == DOCS
    (tools / "sitecustomize.py").write_text(
        SHIM.format(root=str(ROOT), seed=INJECTED_SEED, standin=standin, injected=injected),
        encoding="utf-8",
    )
    for name, run in {"reprobuild": "-m reprobuild", "python": ""}.items():
        wrapper = tools / "bin" / name
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" {run} "$@"\n', encoding="utf-8")
        wrapper.chmod(0o755)
    env = child_env(
        [tools],
        PATH=f"{tools / 'bin'}{os.pathsep}{os.environ['PATH']}",
        REPROBUILD_CRASH_DIR=str(tmp_path / "crashes"),
    )
    return subprocess.run(
        ["bash", "-c", script(page, keep_going=keep_going)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_documented_command_runs(page: Path, tmp_path: Path) -> None:
    res = run_page(page, tmp_path)
    assert res.returncode == 0, (
        f"{page.name}:\n{res.stderr[-6000:]}\n--- stdout:\n{res.stdout[-3000:]}"
    )


MEASURED_PAGES = [README, DOCS / "record-and-pin.md", DOCS / "verify-in-ci.md"]
"""Pages whose documented exit codes depend on which candidates a recording chose (a pin
must change a tactic for ``diff``/``bisect`` to exit 1): run with measured timings too."""


@pytest.mark.measured_timing
@pytest.mark.parametrize("page", MEASURED_PAGES, ids=lambda p: p.name)
def test_documented_exit_codes_hold_with_measured_timings(page: Path, tmp_path: Path) -> None:
    """As a reader runs them: real timings decide every recording, in one fresh run. Runs
    that differ only in which kernel won a race are ``scripts/docs_real_timings.py
    --runs N``'s job (a check before a release), so the suite pays for one run a page."""
    res = run_page(page, tmp_path, injected=False)
    assert res.returncode == 0, (
        f"{page.name}, measured timings:\n{res.stderr[-6000:]}\n--- stdout:\n{res.stdout[-3000:]}"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_shell_blocks_are_the_run_kind(page: Path) -> None:
    """A command block is ```sh (run); ```bash is kept for the README's two set-up
    commands, so no command can slip past ``test_every_documented_command_runs``."""
    tags = [tag for tag, _ in blocks(page)]
    allowed = RUN_TAGS | SHOWN_TAGS | ({"bash"} if page == README else set())
    assert set(tags) <= allowed, f"{page.name}: fences {sorted(set(tags) - allowed)}"


def test_readme_is_a_front_door() -> None:
    """The two set-up commands come first, and ``.ci/run`` runs the second verbatim."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first_two = blocks(README)[:2]
    assert [tag for tag, _ in first_two] == ["bash", "bash"]
    assert first_two[0][1].startswith("python3 -m venv .venv && .venv/bin/pip install . && ")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert first_two[1][1].strip() in ci


def test_no_issue_numbers_in_user_facing_text() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"\bissue\s*#?\d+", text, re.IGNORECASE), page.name


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target} names no file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to {target}: no such heading"


def test_readme_indexes_every_page() -> None:
    text = README.read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        assert f"(docs/{page.name})" in text, f"README does not link docs/{page.name}"


def test_the_runner_fails_a_page_whose_command_fails(tmp_path: Path) -> None:
    """The runner itself: a failing command fails the page, ``# exit N`` expects N, a
    compound command is one command, state (variables, files) carries on in order, and
    ``keep_going`` names every command that fails (``scripts/docs_real_timings.py``)."""
    page = tmp_path / "page.md"
    page.write_text(
        "```sh\nX=1\nfor i in a b; do\n  touch f.$i\ndone\nls f.a f.b\ntest $X = 1\n"
        "false   # exit 1\n```\n\n"
        "```python\nimport pathlib; assert pathlib.Path('f.a').exists()\n```\n"
        "```text\nnot run\n```\n",
        encoding="utf-8",
    )
    assert len(commands(blocks(page)[0][1])) == 5
    ok = run_page(page, tmp_path / "ok")
    assert ok.returncode == 0, ok.stderr
    page.write_text("```sh\ntrue\nfalse\ntrue   # exit 1\n```\n", encoding="utf-8")
    bad = run_page(page, tmp_path / "bad")
    assert bad.returncode == 97 and "command [2] exited 1, the page says 0" in bad.stderr
    every = run_page(page, tmp_path / "every", keep_going=True)
    assert MISMATCH.findall(every.stderr) == [("2", "1", "0"), ("3", "0", "1")]
