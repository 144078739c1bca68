"""Typed uploads: what a client's update carries, and what an aggregator merges.

A share (split slot) or a local update declares what its uploads carry with a class attribute
``uploads: ClassVar[Upload]``; an aggregator declares what it merges with ``merges: ClassVar[Upload]``.
Either may be a method of the instance instead (``def uploads(self) -> Upload``) when it depends on the
settings. Nothing declared means whole weights (``Upload.WEIGHTS``): the built-in ``whole-model`` share and
every aggregator written before the declaration existed (a third party's FedAdam) are weights-only.

When the pipeline is built, the uploads of its split and local update must all be merged by its aggregator;
a mismatch is refused in one line naming both and an installed aggregator that merges them::

    ConfigError: split 'edge-share' uploads per-sample features/logits, which aggregate 'trimmed-mean' does not
    merge (it merges whole weights); use an aggregator that merges them: aggregate = "kd-server"
"""
from __future__ import annotations

import enum
from typing import Any


class Upload(enum.Flag):
    """What crosses from a client to the server in an update (combine with ``|``)."""

    WEIGHTS = enum.auto()
    """Entries of the global model, whole and in its shapes (FedAvg's, LoRA factors, prompts, a client segment)."""
    DELTA = enum.auto()
    """Changes of global-model entries (new minus old), in the global model's shapes."""
    SUBMODEL = enum.auto()
    """Slices of global-model entries (a pruned or width-reduced submodel), with the index map in ``meta``."""
    FEATURES = enum.auto()
    """Per-sample tensors computed on client data: features, logits, labels, sample ids (distillation)."""
    AUXILIARY = enum.auto()
    """Server-bound tensors that are not model entries (control variates, statistics) for the server's own state."""


DESCRIPTIONS: dict[Upload, str] = {
    Upload.WEIGHTS: "whole weights",
    Upload.DELTA: "weight deltas",
    Upload.SUBMODEL: "sliced submodels",
    Upload.FEATURES: "per-sample features/logits",
    Upload.AUXILIARY: "auxiliary tensors",
}

DEFAULT = Upload.WEIGHTS
"""What an undeclared share uploads and an undeclared aggregator merges."""


def describe(kinds: Upload) -> str:
    """``Upload.SUBMODEL | Upload.FEATURES`` -> ``"sliced submodels and per-sample features/logits"``."""
    parts = [text for flag, text in DESCRIPTIONS.items() if flag in kinds]
    return " and ".join(parts) if parts else "nothing"


def _declared(component: Any, attribute: str) -> Upload | None:
    value = getattr(component, attribute, None)
    if callable(value):
        value = value()
    if value is None:
        return None
    if not isinstance(value, Upload):
        from fedcore.errors import ConfigError

        raise ConfigError(f"{type(component).__name__}.{attribute} must be a fedcore.types.Upload (e.g. "
                          f"Upload.WEIGHTS | Upload.FEATURES); got {value!r}")
    return value


def uploads_of(component: Any) -> Upload | None:
    """What ``component`` (a share or a local update) declares its uploads carry; None when it declares nothing."""
    return _declared(component, "uploads")


def merges_of(component: Any) -> Upload:
    """What the aggregator ``component`` declares it merges; whole weights when it declares nothing."""
    return _declared(component, "merges") or DEFAULT


def compatible_aggregators(kinds: Upload, near: Any = None) -> list[str]:
    """Registered aggregator names whose declared ``merges`` covers ``kinds``: those from the package of the
    component ``near`` first (a method's share and its aggregator ship together), then in catalogue order."""
    from fedcore.plugins import list_components
    from fedcore.registry import slots_of

    found = []
    for entry in list_components():
        if "aggregate" in slots_of(entry.obj)[0]:
            declared = getattr(entry.obj, "merges", None)
            merged = declared if isinstance(declared, Upload) else DEFAULT
            if kinds in merged:
                found.append(entry)
    home = type(near).__module__.partition(".")[0] if near is not None else None
    found.sort(key=lambda e: e.obj.__module__.partition(".")[0] != home)
    return [e.name for e in found]


def needs_individual_updates(aggregator: Any) -> bool:
    """Whether ``aggregator`` needs each client's own update, not only their mean change.

    An aggregator declares it with ``needs_individual_updates: ClassVar[bool] = True`` (a robust rule such as the
    median or Krum, a fairness rule weighting clients by their loss), or a method of that name when it depends on
    the settings. One that merges sliced submodels or per-sample features needs each update by nature (each carries
    its own index map or samples). A wrapper that hands the aggregator one combined update (DP-FedAvg's noised mean,
    secure aggregation's sum) refuses such an aggregator when the pipeline is built; see
    :func:`require_mean_aggregator`."""
    declared = getattr(aggregator, "needs_individual_updates", False)
    if callable(declared):
        declared = declared()
    if not isinstance(declared, bool):
        from fedcore.errors import ConfigError

        raise ConfigError(f"{type(aggregator).__name__}.needs_individual_updates must be True or False; "
                          f"got {declared!r}")
    return declared or bool(merges_of(aggregator) & (Upload.SUBMODEL | Upload.FEATURES))


def require_mean_aggregator(pipeline: Any, released: str) -> None:
    """Refuse, in one line, ``pipeline``'s aggregator when it needs each client's own update
    (:func:`needs_individual_updates`): for a wrapper that hands it one combined update. ``released`` says, in the
    wrapper's own words, what it hands on (``"secagg gives the server only the sum of the clients' updates"``); the
    line goes on with the aggregator's name (registered name, else class name) and what to use instead."""
    aggregator = pipeline.provider("aggregate")
    if not needs_individual_updates(aggregator):
        return
    from fedcore.errors import ConfigError
    from fedcore.plugins import registry

    entry = registry().find(aggregator)
    name = entry.name if entry is not None else type(aggregator).__name__
    raise ConfigError(f"{released}, but aggregate = {name!r} needs each client's own update; use an aggregator of "
                      f"the mean change (fedavg, fedbuff, fedasync or a server optimiser)")


def non_weight_uploads(share: Any) -> dict[str, str]:
    """``{entry: ledger kind}`` of what ``share`` uploads that is not weights (features, logits, labels: the
    entries its ``kinds`` labels), in entry order: what a wrapper that clips or sums weight changes cannot take."""
    return {k: share.kinds[k] for k in sorted(share.upload) if share.kinds.get(k, "weights") != "weights"}


def check_uploads(pipeline: Any) -> None:
    """Refuse a pipeline whose aggregator cannot merge what its share and local update upload (one line)."""
    from fedcore.errors import ConfigError

    carried = Upload(0)
    sources = []
    for slot in ("split", "local_update"):
        component = pipeline.provider(slot)
        declared = uploads_of(component)
        if declared is not None:
            carried |= declared
            sources.append((slot, component, declared))
    if not sources:
        carried = DEFAULT
        sources.append(("split", pipeline.provider("split"), DEFAULT))
    aggregator = pipeline.provider("aggregate")
    merged = merges_of(aggregator)
    if carried in merged:
        return
    missing = carried & ~merged
    slot, component, _ = next(s for s in sources if s[2] & missing)
    fits = compatible_aggregators(carried, near=component)
    hint = (f"use an aggregator that merges them: aggregate = \"{fits[0]}\"" if fits else
            "no installed aggregator declares that it merges them")
    raise ConfigError(f"{slot} {_label(pipeline, component)} uploads {describe(missing)}, which aggregate "
                      f"{_label(pipeline, aggregator)} does not merge (it merges {describe(merged)}); {hint}")


def _label(pipeline: Any, component: Any) -> str:
    from fedcore.plugins import registry

    entry = registry().find(component)
    return f"'{entry.name}'" if entry else type(component).__name__


__all__ = ["Upload", "check_uploads", "compatible_aggregators", "describe", "merges_of", "needs_individual_updates",
           "non_weight_uploads", "require_mean_aggregator", "uploads_of"]
