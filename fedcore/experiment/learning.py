"""The learning check: every installed recipe, on its micro learning setup, beats chance by a stated margin.

A recipe declares the shortest setup on which it learns (``Recipe.learning``: its micro setup patched, a number of
rounds, a margin; see :mod:`fedcore.recipes`). The check runs it once at seed 0 and compares the final round's
accuracy with *chance*, the share of the test set's most frequent class (or the recipe's stated ``chance`` where the
evaluation is personalised, each client scored on its own classes). A recipe that starts above chance (a pre-trained
or zero-shot model) declares ``control``: the same setup is run again with the local update replaced by
:class:`NoOpUpdate`, which trains nothing and uploads the share as it came, and the recipe must beat that too.

Recipes come from the registry, so one a plugin adds is checked on arrival (with :data:`LEARNING_DEFAULTS`: its
micro setup, 5 rounds, 10 points); a recipe whose local update does nothing fails (``tests/test_learning_check.py``).

    python -m fedcore.experiment.learning                    # every recipe: accuracy, chance, control, seconds
    python -m fedcore.experiment.learning --recipe fedavg
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
import time
from typing import Any

import attrs
import torch

import fedcore
from fedcore.errors import ConfigError
from fedcore.recipes import LEARNING_DEFAULTS, get_recipe
from fedcore.types import ClientUpdate

__all__ = ["LEARNING_DEFAULTS", "NoOpUpdate", "Outcome", "chance_of", "check", "check_all", "learning_config",
           "markdown"]

METRIC = "test_accuracy"


@attrs.frozen(eq=False, kw_only=True)
class NoOpUpdate:
    """Local-update slot that trains nothing: the share goes back as it came (the untrained control)."""

    @fedcore.hookimpl
    def fedcore_local_update(self, client: Any, share: Any, data: Any, state: Any, ctx: Any) -> ClientUpdate:
        return ClientUpdate.from_share(share, num_examples=len(data), client_id=client.id)


@attrs.frozen(kw_only=True)
class Outcome:
    """One recipe's check: final accuracy against chance (and the control's final accuracy, when it has one)."""

    recipe: str
    accuracy: float
    chance: float
    margin: float
    rounds: int
    control: float | None = None
    seconds: float = 0.0
    detail: str = ""

    @property
    def bar(self) -> float:
        """What the accuracy must exceed: the margin above the better of chance and the control."""
        return max(self.chance, self.control if self.control is not None else 0.0) + self.margin

    @property
    def passed(self) -> bool:
        return not self.detail and self.accuracy > self.bar

    def line(self) -> str:
        control = "" if self.control is None else f", untrained control {self.control:.3f}"
        verdict = "learns" if self.passed else "DOES NOT LEARN"
        why = f" ({self.detail})" if self.detail else ""
        return (f"{self.recipe}: {verdict}{why}: accuracy {self.accuracy:.3f} after {self.rounds} rounds, chance "
                f"{self.chance:.3f}{control}, needs > {self.bar:.3f} (margin {self.margin:.2f}; {self.seconds:.1f} s)")


def learning_config(recipe: str) -> dict[str, Any]:
    """The experiment config of ``recipe``'s learning check (seed 0, one thread). The check reads only the final
    round's accuracy, so the test set is scored once, after the last round (``eval_every = rounds``; the engine
    always evaluates the last round): evaluating draws no training randomness, so the final accuracy is the one an
    every-round run reaches, without a test-set pass per round (unless the recipe's setup sets ``eval_every``)."""
    r = get_recipe(recipe)
    settings = r.learning_settings()
    setup = r.learning_config()
    rounds = int(settings["rounds"])
    return {"name": f"learning-{recipe}", "seed": 0, "rounds": rounds, "eval_every": rounds, "threads": 1,
            "recipe": recipe, **setup}


def chance_of(test: Any) -> float:
    """The share of the test set's most frequent label: what always answering that class scores."""
    from fedcore.data import labels_of

    labels = torch.as_tensor(labels_of(test)).long()
    return float(torch.bincount(labels).max()) / max(len(labels), 1)


def _final(rows: Sequence[Mapping[str, Any]]) -> float:
    scored = [r[METRIC] for r in rows if METRIC in r]
    if not scored:
        raise ConfigError(f"the run recorded no {METRIC!r}: the learning check needs an evaluate slot that scores "
                          f"the test set")
    return float(scored[-1])


def _run(config: Mapping[str, Any], *, replace: Mapping[str, Any] | None = None) -> tuple[float, Any]:
    from fedcore.experiment.build import materialize, plan
    from fedcore.experiment.config import load_config

    m = materialize(plan(load_config(None, base=dict(config))))
    pipeline = m.plan.pipeline.replace(**replace) if replace else m.plan.pipeline
    result = pipeline.run(model=m.model, train=m.train, test=m.test, executor=m.executor, **m.run_kwargs)
    return _final(result.history.rows), m.test


def check(recipe: str, *, local_update: Any = None) -> Outcome:
    """Run ``recipe``'s learning check (``local_update``: a replacement component, for the tests of the check)."""
    settings = get_recipe(recipe).learning_settings()
    config = learning_config(recipe)
    threads = torch.get_num_threads()
    start = time.perf_counter()
    torch.set_num_threads(1)
    try:
        accuracy, test = _run(config, replace={"local_update": local_update} if local_update is not None else None)
        control = _run(config, replace={"local_update": NoOpUpdate()})[0] if settings["control"] else None
    finally:
        torch.set_num_threads(threads)
    chance = float(settings["chance"]) if settings["chance"] is not None else chance_of(test)
    return Outcome(recipe=recipe, accuracy=accuracy, chance=chance, margin=float(settings["margin"]),
                   rounds=int(settings["rounds"]), control=control, seconds=time.perf_counter() - start)


def check_all(recipes: Iterable[str] | None = None) -> list[Outcome]:
    from fedcore.experiment.matrix import installed_recipes

    return [check(r) for r in (recipes or installed_recipes())]


def markdown(outcomes: Sequence[Outcome]) -> str:
    lines = ["| recipe | rounds | final accuracy | chance | untrained control | margin | learns | seconds |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    for o in outcomes:
        control = "-" if o.control is None else f"{o.control:.3f}"
        lines.append(f"| `{o.recipe}` | {o.rounds} | {o.accuracy:.3f} | {o.chance:.3f} | {control} | {o.margin:.2f} | "
                     f"{'yes' if o.passed else '**NO**'} | {o.seconds:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedcore.experiment.learning", description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help="only this recipe (repeatable); default: all installed")
    args = parser.parse_args(argv)
    outcomes = []
    for r in args.recipe or _installed():
        try:
            o = check(r)
        except Exception as exc:  # noqa: BLE001  # one line per recipe; the test shows the traceback
            settings = get_recipe(r).learning_settings()
            o = Outcome(recipe=r, accuracy=float("nan"), chance=float("nan"), margin=float(settings["margin"]),
                        rounds=int(settings["rounds"]), detail=f"{type(exc).__name__}: {exc}")
        print(o.line(), flush=True)
        outcomes.append(o)
    print(markdown(outcomes))
    total = sum(o.seconds for o in outcomes)
    print(f"{sum(o.passed for o in outcomes)} of {len(outcomes)} recipes learn; {total:.1f} s in all")
    return 0 if all(o.passed for o in outcomes) else 1


def _installed() -> list[str]:
    from fedcore.experiment.matrix import installed_recipes

    return installed_recipes()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
