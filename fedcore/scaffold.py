"""``fedcore new plugin NAME [--slot SLOT]``: a plugin distribution that installs, is found by name, runs its recipe
and passes its own contract tests as written (``cargo new``'s idea).

The files follow docs/plugins.md: ``pyproject.toml`` with the entry point and the version policy's pin, ``src/``
with a registration module, one component module (a working component of the chosen slot, with its settings) and
a recipe, ``tests/`` with the three-line contract test and an end-to-end run, and a README whose results block a
sweep fills (``<!-- generated:NAME-results -->``). Nothing is overwritten: the target directory must not exist.
"""
from __future__ import annotations

from pathlib import Path
import re
import textwrap

from fedcore.errors import ConfigError

PIN = "fedcore>=0.1,<1"
"""The dependency every new plugin declares (docs/plugins.md §13, the version policy)."""

NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

# slot -> (module file, class name suffix, imports, class body); {cls} and {name} are filled in
COMPONENTS: dict[str, tuple[str, str, str]] = {
    "aggregate": ("aggregate", '''
        from collections.abc import Sequence
        from typing import Any, ClassVar

        import attrs

        import fedcore
        from fedcore.builtin import weighted_mean
        from fedcore.settings import setting
        from fedcore.types import AggregateResult, ClientUpdate, Upload
        ''', '''
        @attrs.frozen(eq=False, kw_only=True)
        class {cls}:
            """Aggregate slot: the sample-weighted mean of the updates, moved ``server_lr`` of the way from the
            current global model (1 = FedAvg). Replace the body with your method's rule."""

            merges: ClassVar[Upload] = Upload.WEIGHTS
            """What it merges (fedcore.types.Upload): whole weights, the entries of the global model."""

            server_lr: float = setting(1.0, low=0.0, low_open=True, help="fraction of the way to the mean")

            @fedcore.hookimpl
            def fedcore_aggregate(self, model: Any, updates: Sequence[ClientUpdate], ctx: Any) -> AggregateResult:
                mean = weighted_mean(updates, [float(u.num_examples) for u in updates])
                current = model.state_dict()
                state = {{k: current[k] + self.server_lr * (v - current[k]) if v.is_floating_point() else v
                         for k, v in mean.items()}}
                return AggregateResult(state=state)
        '''),
    "local_update": ("update", '''
        from typing import Any

        import attrs

        import fedcore
        from fedcore.settings import setting
        from fedcore.training import train_epochs
        from fedcore.types import ClientData, ClientInfo, ClientState, ClientUpdate, Share
        ''', '''
        @attrs.frozen(eq=False, kw_only=True)
        class {cls}:
            """Local-update slot: ``epochs`` of SGD on the share's trainable parameters with fedcore's training loop.
            Change the loss (``train_epochs(loss=...)``) or the gradients (``adjust_grads=...``) for your method."""

            lr: float = setting(0.05, low=0.0, low_open=True, help="learning rate")
            epochs: int = setting(1, low=1, help="local epochs per round")
            batch_size: int = setting(32, low=1, help="samples per step")

            @fedcore.hookimpl
            def fedcore_local_update(self, client: ClientInfo, share: Share, data: ClientData, state: ClientState,
                                     ctx: Any) -> ClientUpdate:
                out = train_epochs(share.module, data, epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                                   generator=ctx.rng("shuffle"))
                return ClientUpdate.from_share(share, num_examples=len(data), metrics={{"loss": out}})
        '''),
    "select": ("select", '''
        from collections.abc import Sequence
        from typing import Any

        import attrs

        import fedcore
        from fedcore.settings import setting
        from fedcore.types import ClientInfo, ClientState, Share
        ''', '''
        @attrs.frozen(eq=False, kw_only=True)
        class {cls}:
            """Select slot: a seeded random ``fraction`` of the client's samples each round (at least one).
            Score the samples with ``share.module`` instead for a data-selection method."""

            fraction: float = setting(0.5, low=0.0, high=1.0, low_open=True, help="share of the samples to train on")

            @fedcore.hookimpl
            def fedcore_select_data(self, client: ClientInfo, indices: Sequence[int], dataset: Any, share: Share,
                                    state: ClientState, ctx: Any) -> Sequence[int]:
                pool = list(indices)
                keep = max(1, round(self.fraction * len(pool)))
                order = ctx.np_rng("select").permutation(len(pool))[:keep]
                return [pool[i] for i in sorted(order)]
        '''),
    "evaluate": ("evaluate", '''
        from collections.abc import Mapping, Sequence
        from typing import Any

        import attrs

        import fedcore
        from fedcore.builtin import accuracy_and_loss
        from fedcore.settings import setting
        from fedcore.types import ClientInfo, ClientState
        ''', '''
        @attrs.frozen(eq=False, kw_only=True)
        class {cls}:
            """Evaluate slot: the global model's accuracy and loss on the server's test set, under this plugin's
            metric names. Add personalised or per-client metrics here."""

            batch_size: int = setting(256, low=1, help="samples per evaluation batch")

            @fedcore.hookimpl
            def fedcore_evaluate(self, model: Any, dataset: Any, clients: Sequence[ClientInfo],
                                 states: Sequence[ClientState], ctx: Any) -> Mapping[str, float]:
                if dataset is None:
                    return {{}}
                accuracy, loss = accuracy_and_loss(model, dataset, batch_size=self.batch_size)
                return {{"test_accuracy": accuracy, "test_loss": loss}}
        '''),
}
SLOTS = tuple(COMPONENTS)


def _class_name(name: str, slot: str) -> str:
    words = name.split("-") + {"aggregate": ["aggregate"], "local_update": ["update"], "select": ["select"],
                               "evaluate": ["eval"]}[slot]
    return "".join(w[:1].upper() + w[1:] for w in words)


def plugin_files(name: str, slot: str = "aggregate") -> dict[str, str]:
    """Relative path -> text of the distribution ``fedcore-NAME`` with one ``slot`` component named ``NAME``."""
    if not NAME.fullmatch(name):
        raise ConfigError(f"plugin name {name!r} must be lower-case letters and digits joined by '-', "
                          f"starting with a letter (e.g. 'fedadam', 'my-method')")
    if slot not in COMPONENTS:
        raise ConfigError(f"--slot {slot!r} is not allowed; choose one of: {', '.join(SLOTS)}")
    package, cls = f"fedcore_{name.replace('-', '_')}", _class_name(name, slot)
    module, imports, body = COMPONENTS[slot]
    dedent = textwrap.dedent
    component = (f'"""The {slot} component of fedcore-{name}: {cls}."""\n'
                 + "from __future__ import annotations\n" + dedent(imports) + "\n" + dedent(body).format(cls=cls))
    return {
        "pyproject.toml": dedent(f'''\
            [build-system]
            requires = ["setuptools>=64"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "fedcore-{name}"
            version = "0.1.0"
            description = "{cls}: a fedcore plugin filling the {slot} slot"
            readme = "README.md"
            requires-python = ">=3.10"
            dependencies = ["{PIN}", "torch", "attrs>=23.1"]
            keywords = ["fedcore", "fedcore-plugin", "federated-learning"]

            [project.optional-dependencies]
            test = ["fedcore[testing]"]

            [project.entry-points.fedcore]
            {name} = "{package}.plugin"

            [tool.setuptools.packages.find]
            where = ["src"]
            '''),
        f"src/{package}/__init__.py": dedent(f'''\
            """fedcore-{name}: {cls} ({slot} slot) and the recipe "{name}"."""
            from {package}.{module} import {cls}

            __all__ = ["{cls}"]
            '''),
        f"src/{package}/plugin.py": dedent(f'''\
            """Entry point ``{name}`` (group ``fedcore``): registers the component and its recipe; imports only."""
            import fedcore
            from {package}.{module} import {cls}
            from {package}.recipes import RECIPE


            @fedcore.hookimpl
            def fedcore_register_components(registry):
                registry.add("{name}", {cls})
                registry.add_recipe("{name}", RECIPE)
            '''),
        f"src/{package}/{module}.py": component,
        f"src/{package}/recipes.py": dedent(f'''\
            """The recipe "{name}": fedcore's defaults, {cls} in the {slot} slot (each slot swappable by name)."""
            import fedcore

            RECIPE = fedcore.Recipe(slots={{"{slot}": "{name}"}}, help="{cls} in the {slot} slot, defaults elsewhere")
            '''),
        "tests/test_contract.py": dedent(f'''\
            """fedcore's contract checks for every component of this plugin."""
            from fedcore.testing import parametrize_with_checks
            from {package} import {cls}


            @parametrize_with_checks([{cls}()])
            def test_contract(component, check):
                check(component)
            '''),
        f"tests/test_{name.replace('-', '_')}.py": dedent(f'''\
            """The plugin is found by name and its recipe runs end to end on fedcore's tiny fixture."""
            import fedcore
            from fedcore.testing import tiny_data, tiny_model
            from {package} import {cls}


            def test_found_by_name():
                assert fedcore.get("{name}") is {cls}
                assert fedcore.recipe("{name}").describe()["slots"]["{slot}"] == "{name}"


            def test_the_recipe_runs():
                train, test = tiny_data()
                result = fedcore.recipe("{name}").run(model=tiny_model(), train=train, test=test, num_clients=3,
                                                       rounds=2, seed=0)
                accuracy = result.history.column("test_accuracy")
                assert len(accuracy) == 2 and 0.0 <= accuracy[-1] <= 1.0
            '''),
        "README.md": dedent(f'''\
            # fedcore-{name}

            {cls} for [fedcore](https://github.com/fedcore/fedcore): a component in the `{slot}` slot, registered as
            `{name}`, and the recipe `{name}` (fedcore's defaults with it in that slot). Cite the paper it implements
            here.

            ## Use

            ```bash
            pip install -e ".[test]" && python -m pytest tests     # contract checks and an end-to-end run
            fedcore describe {name}                                  # its slot, settings and package
            ```

            ```python
            import fedcore

            pipe = fedcore.recipe("{name}")                         # or any recipe with {slot}="{name}"
            ```

            ## Settings

            `fedcore describe {name}` lists them with their types, defaults, allowed values and help.

            ## Deviations and decisions

            (What differs from the paper, and why.)

            ## Results

            Filled by a sweep (`fedcore sweep ... --report`, then a tables script writes between the markers):

            <!-- generated:{name}-results -->
            (no results yet)
            <!-- /generated:{name}-results -->
            '''),
    }


def new_plugin(name: str, directory: str | Path, slot: str = "aggregate") -> list[Path]:
    """Write the distribution ``fedcore-NAME`` into ``directory`` (which must not exist); the paths written."""
    files = plugin_files(name, slot)
    root = Path(directory)
    if root.exists():
        raise ConfigError(f"{root} already exists; fedcore new writes a new directory and overwrites nothing")
    written = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


__all__ = ["PIN", "SLOTS", "new_plugin", "plugin_files"]
