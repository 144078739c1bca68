"""The README's Python example runs as written."""
from pathlib import Path
import re

ROOT = Path(__file__).resolve().parents[1]


def section_code(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"expected one python block under '{heading}'"
    return blocks[0]


def test_compose_a_pipeline_example_runs(capsys):
    code = section_code("Compose a pipeline in Python")
    assert 15 <= len(code.strip().splitlines()) <= 25
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    acc, nbytes = capsys.readouterr().out.splitlines()[0].split()
    assert float(acc) > 0.3 and int(nbytes) > 0  # 10 classes: chance is 0.1
    assert len(ns["result"].history) == 5
    assert ns["uniform"].provider("aggregate").weighting == "uniform"
    assert ns["same"].describe()["slots"]["partition"] == "dirichlet"
    assert ns["same"].provider("schedule").fraction == 0.5


def test_the_plugin_section_links_exist():
    text = (ROOT / "README.md").read_text()
    for link in ("docs/plugins.md", "docs/hooks.md", "plugins/fedcore-robust"):
        assert f"]({link})" in text and (ROOT / link).exists()
