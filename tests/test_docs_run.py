"""Docs that run: every code block in README.md and docs/*.md is a test.

The convention (also stated at the top of docs/plugins.md):

* ```` ```python ```` blocks of one page run in order in one namespace, like a doctest page, in a temporary
  working directory per page, which stands for the folder the page's commands run from (:func:`home`): a plugin's
  or substrate's README runs from its own folder (its files linked in, nothing from the repository root), every
  other page from the repository root (``examples/`` and ``plugins/`` linked in). Each block is its own test,
  ``PAGE:LINE``.
* ```` ```toml ```` blocks are experiment configs, checked with ``fedcore describe`` (parsed, every name and
  setting resolved, nothing runs), unless their first line is a comment naming another file:
  ``# pyproject.toml`` (parsed; its ``fedcore`` entry points must name an installed registration module, or
  the page's own plugin) or ``# devices.toml`` (loaded with ``fedcore.runtime.load_profiles``).
* ```` ```bash ```` / ```` ```console ```` blocks: each command line is its own test. Lines that start with
  ``fedcore `` run through the CLI (``fedcore.cli.main``, in process) in the page's directory, in page order;
  other commands (``pip``, ``python -m build``, ``scripts/dev``, ...) are reported as skipped, with the reason.
  ``cd DIR`` names, from the repository root, the folder the page's commands run from: it must be the page's own
  (``cd plugins/fedcore-robust`` on that plugin's README, stated once, as the page's first command after any
  ``pip install``; ``test_a_plugin_page_states_its_folder_first``).
* A block without a language is a diagram or a table, not code; one that looks like a command or code fails
  until it is tagged.
* Every file a command names (``repro/tables.py``, ``examples/cos2p.toml`` on a plugin's page) exists, relative to
  the page's folder, run or not: a moved script cannot leave a README command behind, and a plugin's page cannot
  name a path from the repository root (``plugins/<name>/...``, ``examples/...``, ``scripts/...``) unless that
  path is in its own folder too.
* A block opts out only with ``<!-- docs-run: skip (reason) -->`` on the line before it; it is reported as
  skipped with that reason (``-ra`` prints the reasons).

``test_hooks_md_plugin_installs_and_runs`` builds a distribution from exactly the blocks of docs/hooks.md whose
first line names a file, pip-installs it into a scratch directory and runs the page's usage block by name (in this
process, with that directory on ``sys.path``).
"""
from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
import contextlib
import importlib
import io
import json
import os
from pathlib import Path
import re
import shlex
import subprocess
import sys

import attrs
import pytest
import tomllib
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "substrates").glob("*/README.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "plugins").glob("*/README.md"))]
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)(.*)$")
SKIP = re.compile(r"^<!-- docs-run: skip \((.+)\) -->$")
FILE_COMMENT = re.compile(r"^#\s*((?:[\w.-]+/)*[\w.-]+\.(?:py|toml))\b")
LOOKS_LIKE_CODE = re.compile(r"^\s*(\$ |fedcore |python |pip |import |from \S+ import |def |class |@)")
RUNNABLE = {"python", "toml", "bash", "console"}
NOT_CODE = {"", "text"}


def home(page: str) -> Path:
    """The folder a page's commands run from, relative to the root: a plugin's or substrate's README runs from its
    own folder (a distribution is self-contained: ``cd plugins/<name>``, then its own paths), any other page from
    the repository root."""
    path = Path(page)
    return path.parent if path.parts[0] in ("plugins", "substrates") and len(path.parts) == 3 else Path(".")


@attrs.frozen(kw_only=True)
class Block:
    """One fenced block of a page: where it opens, its language, its text and an opt-out reason."""

    page: str
    line: int                   # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None = None

    @property
    def first_line(self) -> int:
        return self.line + 1

    @property
    def names_file(self) -> str | None:
        m = FILE_COMMENT.match(self.text.lstrip("\n").split("\n", 1)[0])
        return m.group(1) if m else None


@attrs.frozen(kw_only=True)
class Step:
    """One test: a python or toml block, or one command line of a bash/console block."""

    block: Block
    line: int
    kind: str                   # python | toml | command | not-code
    text: str

    @property
    def id(self) -> str:
        return f"{self.block.page}:{self.line}:{self.kind}"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of a Markdown page, with the opt-out marker each one carries."""
    lines = (ROOT / page).read_text().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = "\n".join(line[indent:] for line in lines[i + 1:j])
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.match(before)
        out.append(Block(page=page, line=i + 1, lang=lang, text=body + "\n", skip=skip.group(1) if skip else None))
        i = j + 1
    return out


def command_lines(block: Block) -> Iterator[tuple[int, str]]:
    """(line, command) for each command of a bash/console block; ``\\`` continuations joined, output skipped."""
    pending, start = "", 0
    for offset, raw in enumerate(block.text.split("\n")):
        line = raw.strip()
        if block.lang == "console" and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not line or (line.startswith("#") and not pending):
            continue
        if not pending:
            start = block.first_line + offset
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def steps(page: str) -> list[Step]:
    out: list[Step] = []
    for b in blocks(page):
        if b.lang in ("bash", "console"):
            out += [Step(block=b, line=n, kind="command", text=cmd) for n, cmd in command_lines(b)]
        else:
            out.append(Step(block=b, line=b.line, kind=b.lang if b.lang in RUNNABLE else "not-code", text=b.text))
    return out


ALL_STEPS = [s for page in PAGES for s in steps(page)]


# -- running a page ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def quiet_torch_state() -> Iterator[None]:
    """One intra-op thread while docs run (the machine is shared); threads and the global RNG restored after."""
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)


def run_python(step: Step, namespace: dict) -> None:
    tree = ast.parse(step.text, filename=str(ROOT / step.block.page))
    ast.increment_lineno(tree, step.block.line)
    exec(compile(tree, str(ROOT / step.block.page), "exec"), namespace)  # noqa: S102 (running the docs is the point)


def run_toml(step: Step, namespace: dict) -> None:
    doc = tomllib.loads(step.text)
    named = step.block.names_file
    if named is None:  # an experiment config: what `fedcore describe` does
        Path("docs-config.toml").write_text(step.text)
        run_command(Step(block=step.block, line=step.line, kind="command", text="fedcore describe docs-config.toml"),
                    namespace)
    elif named.endswith("pyproject.toml"):
        for name, target in doc.get("project", {}).get("entry-points", {}).get("fedcore", {}).items():
            own = target.replace(".", "/") + ".py"  # a module written on this page (docs/hooks.md's plugin)
            written = [b for b in blocks(step.block.page) if (b.names_file or "").endswith(own)]
            if written:
                defined = {n.name for n in ast.parse(written[0].text).body if isinstance(n, ast.FunctionDef)}
            else:
                defined = {n for n in dir(importlib.import_module(target)) if n.startswith("fedcore_")}
            assert "fedcore_register_components" in defined, \
                f"entry point {name} = {target!r} has no fedcore_register_components"
    elif named == "devices.toml":
        from fedcore.runtime import load_profiles

        assert set(doc["profiles"]) <= set(load_profiles(step.text))
    else:
        raise AssertionError(f"a toml block names {named!r}: expected pyproject.toml, devices.toml or no name")


def run_command(step: Step, namespace: dict) -> None:
    argv = shlex.split(step.text, comments=True)
    if argv[0] == "cd":
        check_cd(step.block.page, argv)
        assert home(step.block.page) != Path("."), f"{step.id}: a root page's commands run from the root; opt a " \
            "block that changes the folder out of running, or move its commands to the plugin's README"
        return
    from fedcore.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv[1:])
    assert status == 0, f"`{step.text}` exited {status}:\n{err.getvalue()}{out.getvalue()[-2000:]}"


def check_cd(page: str, argv: list[str]) -> None:
    """A plugin page's ``cd`` states, from the repository root, the folder its commands run from: the page's own.
    A root page's ``cd`` names a folder of the repository (its block opts out of running: see ``run_command``)."""
    if home(page) == Path("."):
        assert len(argv) == 2 and (ROOT / argv[1]).is_dir(), f"{page}: `{shlex.join(argv)}`: no such folder"
        return
    assert len(argv) == 2 and Path(os.path.normpath(argv[1])) == home(page), \
        f"{page}: `{shlex.join(argv)}`: this page's commands run from {home(page).as_posix()}; write `cd " \
        f"{home(page).as_posix()}` (from the repository root), then paths relative to it"


def folder(step: Step) -> Path:
    """The folder, relative to the root, a command runs from: its page's :func:`home`, or on a root page the folder
    the page's last ``cd`` before it named."""
    where = home(step.block.page)
    if where != Path("."):
        return where
    for s in steps(step.block.page):
        if s == step:
            break
        if s.kind == "command" and s.text.startswith("cd "):
            where = Path(os.path.normpath(shlex.split(s.text, comments=True)[1]))
    return where


RUNNERS: dict[str, Callable[[Step, dict], None]] = {"python": run_python, "toml": run_toml, "command": run_command}


def runnable(step: Step) -> str | None:
    """Why a step does not run, or None."""
    if step.block.skip:
        return f"{step.id}: docs-run: skip ({step.block.skip})"
    if step.kind == "command" and not step.text.startswith(("fedcore ", "cd ")):
        return f"{step.id}: not a fedcore command, not run: {step.text}"
    if step.kind == "not-code":
        return f"{step.id}: not code (a diagram or table)"
    return None


class Page:
    """A page's shared namespace and directory; steps run in document order, each at most once."""

    def __init__(self, page: str, directory: Path) -> None:
        self.page, self.dir = page, directory
        if home(page) == Path("."):
            (directory / "examples").symlink_to(ROOT / "examples")
            (directory / "plugins").symlink_to(ROOT / "plugins")  # a root page may name a plugin's files
        else:  # the plugin's own files, and only those; what its commands write stays in the scratch directory
            for entry in (ROOT / home(page)).iterdir():
                if entry.name not in OUTPUTS and not entry.name.startswith("."):
                    (directory / entry.name).symlink_to(entry)
        self.namespace: dict = {"__name__": f"docs:{page}"}
        self.done: dict[str, BaseException | None] = {}

    def run_through(self, target: Step) -> None:
        for step in steps(self.page):
            if step.id in self.done or runnable(step):
                if step == target:
                    break
                continue
            failure = next((f"{sid} failed first" for sid, e in self.done.items() if e is not None), None)
            if failure and step == target:
                pytest.fail(f"not run: {failure}", pytrace=False)
            if failure:
                continue
            cwd = Path.cwd()
            os.chdir(self.dir)
            try:
                with quiet_torch_state():
                    RUNNERS[step.kind](step, self.namespace)
                self.done[step.id] = None
            except BaseException as exc:
                self.done[step.id] = exc
                if step == target:
                    raise
            finally:
                os.chdir(cwd)
            if step == target:
                break


_pages: dict[str, Page] = {}


# one xdist group per page: a page's steps share its namespace and run in order on one worker
@pytest.mark.parametrize("step", [pytest.param(s, id=s.id, marks=pytest.mark.xdist_group(f"docs:{s.block.page}"))
                                  for s in ALL_STEPS])
@pytest.mark.slow
def test_doc_step(step: Step, tmp_path_factory: pytest.TempPathFactory) -> None:
    if step.kind == "not-code":
        looks = [line for line in step.text.splitlines() if LOOKS_LIKE_CODE.match(line)]
        assert not looks, f"{step.id}: an untagged block that looks like code; tag it (```bash, ```python): {looks[0]}"
    reason = runnable(step)
    if reason:
        pytest.skip(reason)
    if step.kind not in RUNNERS:
        pytest.fail(f"{step.id}: unknown language {step.block.lang!r}; use one of {sorted(RUNNABLE | NOT_CODE)}")
    if step.block.page not in _pages:
        _pages[step.block.page] = Page(step.block.page, tmp_path_factory.mktemp("docs"))
    _pages[step.block.page].run_through(step)


def test_skip_markers_sit_on_a_block() -> None:
    """A marker that is not right before a fence would silently opt out nothing."""
    for page in PAGES:
        lines = (ROOT / page).read_text().split("\n")
        for i, line in enumerate(lines):
            if line.strip().startswith("<!--") and "docs-run" in line:
                assert SKIP.match(line.strip()), f"{page}:{i + 1}: write <!-- docs-run: skip (reason) -->"
                after = next((x for x in lines[i + 1:] if x.strip()), "")
                assert FENCE.match(after), f"{page}:{i + 1}: a docs-run marker must come right before a code block"


NAMED_FILE = re.compile(r"^(?:\./)?((?:[\w.-]+/)+[\w.-]+\.(?:py|toml|md))$")


def named_files(command: str) -> list[str]:
    """The repository files a command line names: path-like arguments ending in .py/.toml/.md, not under runs/,
    and not a placeholder (an upper-case stem such as ``examples/paper/NAME.toml`` stands for any file there)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    return [m.group(1) for w in words for m in [NAMED_FILE.match(w)]
            if m and not m.group(1).startswith("runs/") and not Path(m.group(1)).stem.isupper()]


def root_paths(step: Step) -> list[str]:
    """The paths a command run from a plugin's folder names from the repository root: path-like words whose first
    part is an entry of the root but not of the folder (``plugins/fedcore-x/...``, ``scripts/dev``, ``docs/...``)."""
    where = folder(step)
    if where == Path(".") or step.text.startswith("cd "):
        return []
    try:
        words = shlex.split(step.text, comments=True)
    except ValueError:
        words = step.text.split()
    paths = [w.split("=", 1)[-1] for w in words]  # --write=plugins/... too
    return [p for p in paths if "/" in p and not p.startswith(("/", "-")) and Path(p).parts[0] not in OUTPUTS
            and (ROOT / Path(p).parts[0]).exists() and not (ROOT / where / Path(p).parts[0]).exists()]


OUTPUTS = ("runs", "dist", "build")  # what commands write, wherever they run
COMMANDS = [s for s in ALL_STEPS if s.kind == "command" and (named_files(s.text) or root_paths(s))]


@pytest.mark.parametrize("step", COMMANDS, ids=[s.id for s in COMMANDS])
def test_the_files_a_command_names_exist_from_the_pages_folder(step: Step) -> None:
    where = folder(step)
    missing = [f for f in named_files(step.text) if not (ROOT / where / f).exists()]
    assert not missing, f"{step.id}: `{step.text}` names {missing}, not in {where.as_posix()} (the page's commands " \
                        "run from there)"
    rooted = root_paths(step)
    assert not rooted, f"{step.id}: `{step.text}` names {rooted} from the repository root; this page's commands run " \
                       f"from {where.as_posix()} (`cd {where.as_posix()}` once, then paths relative to it)"


def test_a_plugin_page_cannot_name_the_repository_root() -> None:
    """On a plugin's page a path from the root is caught even where it names a folder (no file to look for), and a
    ``cd`` to any folder but the page's own fails; outputs (``runs/``, ``dist/``) and the page's own paths pass."""
    block = Block(page="plugins/fedcore-robust/README.md", line=1, lang="bash", text="")

    def step(text: str) -> Step:
        return Step(block=block, line=2, kind="command", text=text)

    assert root_paths(step("python -m pytest -q plugins/fedcore-robust")) == ["plugins/fedcore-robust"]
    assert root_paths(step("scripts/dev test --write=docs/x.md")) == ["scripts/dev", "docs/x.md"]
    assert root_paths(step("python -m twine upload dist/*")) == []
    assert root_paths(step("python repro/tables.py runs/x --write README.md --tag robust-results")) == []
    check_cd(block.page, ["cd", "plugins/fedcore-robust/"])
    with pytest.raises(AssertionError, match="this page's commands run from plugins/fedcore-robust"):
        check_cd(block.page, ["cd", "plugins/fedcore-dp"])


PLUGIN_PAGES = [p for p in PAGES if home(p) != Path(".")]


@pytest.mark.parametrize("page", PLUGIN_PAGES)
def test_a_plugin_page_states_its_folder_first(page: str) -> None:
    """A reader copies a plugin's commands from its README: the first one (after any ``pip install``, which works
    anywhere) is ``cd plugins/<name>``, stated once, and no other ``cd`` leaves the folder."""
    commands = [s.text for s in steps(page) if s.kind == "command"]
    rest = [c for c in commands if not c.startswith("pip install ")]
    if not rest:
        return
    assert rest[0].startswith("cd "), f"{page}: the first command is `{rest[0]}`; state the folder the commands run " \
                                      f"from first: `cd {home(page).as_posix()}` (from the repository root)"
    for c in (c for c in rest if c.startswith("cd ")):
        check_cd(page, shlex.split(c, comments=True))
    assert sum(c.startswith("cd ") for c in rest) == 1, f"{page}: state `cd {home(page).as_posix()}` once"


def test_named_files_reads_paths_from_a_command() -> None:
    cmd = "nice fedcore sweep plugins/fedcore-x/repro/x_sweep.toml --out runs/x && python repro/tables.py runs/x/a.md"
    assert named_files(cmd) == ["plugins/fedcore-x/repro/x_sweep.toml", "repro/tables.py"]


# -- docs/hooks.md is enough to write, register and publish a plugin -------------------------------------------

# After the doc's usage block: the same run with plain fedavg, and how far each moved the global weights.
CHECK = """
import json
from fedcore.data import load_digits
from fedcore.models import tiny_mlp
import fedcore
import fedcore_clipping.plugin

def moved(aggregate, rounds):
    torch.manual_seed(0)
    model = tiny_mlp(num_classes=10, hidden=64)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    pipe = fedcore.Pipeline.from_config({"aggregate": aggregate})
    pipe.run(model=model, train=train, test=test, num_clients=10, rounds=rounds, seed=0)
    return float(sum(((v - start[k]) ** 2).sum() for k, v in model.state_dict().items()) ** 0.5)

print(json.dumps({
    "plugin": fedcore_clipping.plugin.__file__,
    "clipped": result.history.column("agg_clipped"),
    "listed": [p.distribution for p in fedcore.list_plugins() if p.name == "clipping"],
    "moved_clipped": moved({"name": "clipped-mean", "max_norm": 0.05}, 1),
    "moved_fedavg": moved("fedavg", 1),
}))
"""


@contextlib.contextmanager
def installed_at(target: Path) -> Iterator[None]:
    """``target`` (a ``pip install --target`` folder) on ``sys.path`` for the block, as ``PYTHONPATH`` would put it
    for a new interpreter: its entry points are found by fedcore's plugin discovery; everything it imported and the
    catalogue that named it are forgotten after."""
    import fedcore

    before = set(sys.modules)
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    fedcore.plugins.refresh()
    try:
        yield
    finally:
        sys.path.remove(str(target))
        for name in set(sys.modules) - before:
            if name.split(".")[0] == "fedcore_clipping":
                del sys.modules[name]
        importlib.invalidate_caches()
        fedcore.plugins.refresh()


@pytest.mark.integration
def test_hooks_md_plugin_installs_and_runs(tmp_path: Path) -> None:
    """The page's files, pip-installed (a child pip, the point), then its usage block run by name in this process
    with the install folder on the path (what ``PYTHONPATH`` gives a new interpreter; no second torch start-up)."""
    page = "docs/hooks.md"
    files = [b for b in blocks(page) if b.names_file]
    names = sorted(b.names_file for b in files)
    assert "pyproject.toml" in names and any(n.endswith(".py") for n in names), names
    source = tmp_path / "fedcore-clipping"
    for b in files:
        (source / b.names_file).parent.mkdir(parents=True, exist_ok=True)
        (source / b.names_file).write_text(b.text)
    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(target), str(source)],
                             capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stderr
    usage = [b for b in blocks(page) if b.lang == "python" and "clipped-mean" in b.text and not b.names_file]
    assert len(usage) == 1, "docs/hooks.md: expected one usage block naming clipped-mean"
    import fedcore

    assert "clipped-mean" not in fedcore.plugins.registry().names(), "found before it was installed"
    out_text = io.StringIO()
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        with installed_at(target), quiet_torch_state(), contextlib.redirect_stdout(out_text):
            exec(compile(usage[0].text + CHECK, str(ROOT / page), "exec"),  # noqa: S102 (running the docs)
                 {"__name__": "docs:hooks-usage", "torch": torch})
    finally:
        os.chdir(cwd)
    assert "clipped-mean" not in fedcore.plugins.registry().names(), "the test plugin stayed registered"
    out = json.loads(out_text.getvalue().strip().splitlines()[-1])
    assert out["plugin"].startswith(str(target))            # the installed copy, not a file of the checkout
    assert out["listed"] == ["fedcore-clipping"]
    assert len(out["clipped"]) == 3 and all(0.0 <= c <= 1.0 for c in out["clipped"])
    # every client's change is scaled to norm <= 0.05, so their weighted mean moves the model by at most 0.05;
    # FedAvg moves it much further
    assert out["moved_clipped"] <= 0.05 + 1e-6 < out["moved_fedavg"]


# -- doc examples import only the public API --------------------------------------------------------------------

def _public_api_scan():
    """``private_uses`` and the documented public API of tests/test_public_api.py (one definition of "public")."""
    spec = importlib.util.spec_from_file_location("_public_api_for_docs", ROOT / "tests" / "test_public_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.private_uses, module.PUBLIC


def test_no_doc_example_imports_a_private_module():
    """docs/plugins.md §12: examples are what strangers copy, so they use only the public API (``fedcore.engine``,
    ``fedcore.pipeline``, submodules of public packages are private). Pages written for fedcore's own developers
    (experiments, runtime internals) may show internals only in blocks that opt out of running."""
    private_uses, public = _public_api_scan()
    found = []
    for page in PAGES:
        for b in blocks(page):
            if b.lang != "python" or b.skip:
                continue
            try:
                problems = private_uses(b.text, public)
            except SyntaxError:
                continue  # a fragment; test_doc_step reports it if it is meant to run
            found += [f"{page}:{b.first_line}: {p}" for p in problems]
    assert not found, "doc examples that import outside the public API:\n" + "\n".join(found)
