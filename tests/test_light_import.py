"""Registration stays light: the check that a plugin's registration imports no heavy library, and its parser.

The whole installed set is checked through the CLI in ``tests/test_discover.py`` (``fedcore describe`` under
``-X importtime``); here the check itself: it names the library and the module that imported it, ignores what
``import torch`` imports on its own, and (one fresh interpreter) tells a light plugin from a heavy one.
"""
from __future__ import annotations

import os
import textwrap

import pytest

from fedcore.testing import HEAVY_LIBRARIES, heavy_imports
from fedcore.testing.light_import import MARK, imported_heavy


def importtime(*rows: tuple[int, str]) -> str:
    """``python -X importtime`` lines for (depth, module) rows, in the order imports finish."""
    return "\n".join(f"import time:       10 |         20 | {'  ' * depth}{module}" for depth, module in rows)


def test_a_heavy_library_is_named_with_the_module_that_imported_it():
    text = importtime(
        (0, "fedcore_robust.aggregators"),
        (5, "torchvision.ops"), (4, "torchvision"), (3, "timm.layers"),  # timm brought in torchvision: timm's
        (2, "timm.models.vision_transformer"), (1, "fedcore_distill.costs"), (0, "fedcore_distill"),
        (2, "sympy"), (1, "torch.fx"), (0, "torch"),                      # what `import torch` imports is torch's
    )
    assert imported_heavy(text) == ["timm: fedcore_distill > fedcore_distill.costs > timm.models.vision_transformer"]
    assert imported_heavy(text, heavy=("sympy",)) == []
    assert imported_heavy(text, heavy=("torchvision",)) == [
        "torchvision: fedcore_distill > fedcore_distill.costs > timm.models.vision_transformer > timm.layers > "
        "torchvision"]


def test_only_what_follows_the_mark_counts():
    text = importtime((1, "scipy.linalg"), (0, "scipy")) + f"\n{MARK}\n" + importtime((1, "PIL.Image"),
                                                                                     (0, "my_plugin.plugin"))
    assert imported_heavy(text, after=MARK) == ["PIL: my_plugin.plugin > PIL.Image"]
    assert imported_heavy(text, after=MARK, heavy=("scipy",)) == []
    assert set(HEAVY_LIBRARIES) >= {"timm", "peft", "open_clip", "ray", "torchvision", "datasets", "matplotlib"}


@pytest.mark.integration
def test_a_light_plugin_passes_and_a_heavy_one_is_named(tmp_path, monkeypatch):
    """One fresh interpreter for both: the worked-example plugin is light; a registration module whose component
    module imports the (stand-in) heavy library at its top is named with that module."""
    (tmp_path / "heavy_stand_in.py").write_text("VALUE = 1\n")
    (tmp_path / "fc_heavy_components.py").write_text(textwrap.dedent('''
        import attrs
        import fedcore
        import heavy_stand_in  # at the top: what the rule forbids

        @attrs.frozen(eq=False, kw_only=True)
        class Mean:
            """A mean."""

            @fedcore.hookimpl
            def fedcore_aggregate(self, model, updates, ctx):
                return None
    '''))
    (tmp_path / "fc_heavy_plugin.py").write_text(textwrap.dedent('''
        import fedcore
        from fc_heavy_components import Mean

        @fedcore.hookimpl
        def fedcore_register_components(registry):
            registry.add("heavy-mean", Mean)
    '''))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    problems = heavy_imports("fedcore_robust.plugin", "fc_heavy_plugin", heavy=(*HEAVY_LIBRARIES, "heavy_stand_in"))
    assert problems == ["heavy_stand_in: fc_heavy_plugin > fc_heavy_components > heavy_stand_in"]
