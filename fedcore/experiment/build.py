"""From a validated config to the things a run needs, in two steps.

:func:`plan` only checks and resolves names (pipeline components, dataset and model factories, the
executor): no data is read and no model is built, so every mistake in a config is reported before
any work. :func:`materialize` then loads the dataset, builds the model (seeded) and the executor.
"""
from __future__ import annotations

from collections.abc import Mapping
import copy
import functools
import hashlib
import importlib
import inspect
import json
import random
from typing import Any

import attrs
import numpy as np
import torch

import fedcore
from fedcore.engine.update_norms import DEFAULT_BOUND
from fedcore.errors import ConfigError, FedcoreError
from fedcore.experiment.config import _show, _type_name, tables
from fedcore.hookspecs import SLOT_HOOKS
from fedcore.models.lora import LoRAConfig, applies_model_lora, attach_lora
from fedcore.pipeline import Pipeline
from fedcore.recipes import get_recipe
from fedcore.registry import Entry
from fedcore.runtime.placement import Placement
from fedcore.settings import settings_of

RESULT_KEYS = ("seed", "rounds", "num_clients", "eval_every", "threads", "precision", "update_norm_bound", "dataset",
               "model", "pipeline")
"""Top-level keys that change what a run computes (with every extension table); the fingerprint covers them.
``device`` is left out on purpose: a run checkpointed on a GPU resumes on the CPU and back."""


def split_spec(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    return spec["name"], {k: v for k, v in spec.items() if k != "name"}


def _parameters(fn: Any) -> list[inspect.Parameter]:
    # misc: mypy calls __init__ on an instance unsound; here it is the class's own, only read for its signature
    target = fn.__init__ if isinstance(fn, type) else fn  # type: ignore[misc]
    try:
        signature = _signature(target)
    except TypeError:  # an unhashable callable: read it afresh
        signature = inspect.signature(target)
    return list(signature.parameters.values())


@functools.lru_cache(maxsize=1024)
def _signature(target: Any) -> inspect.Signature:
    """``inspect.signature``, once per factory (a sweep plans every cell's components: ~13 % of a plan)."""
    return inspect.signature(target)


_PLAIN_TYPES = {"bool", "int", "float", "str", "list", "dict"}
"""TOML's value types by Python name: an annotation listing several of them is checked against them."""


def _annotated_types(fn: Any) -> dict[str, set[str]]:
    """Per keyword parameter, the type names its annotation lists (``"bool | str"`` -> {"bool", "str"})."""
    out: dict[str, set[str]] = {}
    for p in _parameters(fn):
        text = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", None)
        if isinstance(text, str):
            out[p.name] = {part.strip() for part in text.split("|")}
    return out


def factory_defaults(fn: Any) -> tuple[dict[str, Any], set[str], bool]:
    """(defaults of keyword parameters, required ones, whether it takes ``**kwargs``) of a factory or class."""
    params = _parameters(fn)
    if isinstance(fn, type):
        params = params[1:]  # self
    defaults, required, var_kw = {}, set(), False
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            if p.default is p.empty:
                required.add(p.name)
            else:
                defaults[p.name] = p.default
    return defaults, required, var_kw


def check_settings(fn: Any, settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Settings for a factory with unknown names, missing required ones and wrong types reported; returns
    the settings with the factory's plain defaults filled in (for the resolved config)."""
    defaults, required, var_kw = factory_defaults(fn)
    annotated = _annotated_types(fn)
    allowed = sorted(set(defaults) | required)
    if not var_kw:
        unknown = [k for k in settings if k not in allowed]
        if unknown:
            raise ConfigError(f"{where}: unknown setting {unknown[0]!r}; allowed: {', '.join(allowed) or '(none)'}")
    missing = sorted(required - set(settings))
    if missing:
        raise ConfigError(f"{where}: missing required setting {missing[0]!r}")
    for k, v in settings.items():
        d = defaults.get(k)
        if d is None or v is None:
            continue
        kinds = annotated.get(k, set()) - {"None"}
        if len(kinds) > 1 and kinds <= _PLAIN_TYPES:  # a setting that takes several types (``pretrained: bool | str``)
            if type(v).__name__ in kinds or isinstance(v, int) and not isinstance(v, bool) and "float" in kinds:
                continue
            raise ConfigError(f"{where}.{k} = {_show(v)} has type {_type_name(type(v))}; expected "
                              f"{' or '.join(sorted(kinds))}")
        if isinstance(d, bool) or isinstance(v, bool):
            ok = isinstance(v, bool) == isinstance(d, bool)
        elif isinstance(d, float):
            ok = isinstance(v, (int, float))
        elif isinstance(d, (int, str)):
            ok = isinstance(v, type(d))
        elif isinstance(d, (tuple, list)):
            ok = isinstance(v, (tuple, list))
        else:
            ok = True
        if not ok:
            raise ConfigError(f"{where}.{k} = {_show(v)} has type {_type_name(type(v))}; expected "
                              f"{_type_name(type(d))} (the default is {d!r})")
    filled = {k: v for k, v in defaults.items() if isinstance(v, (bool, int, float, str)) and k not in settings}
    return {**filled, **settings}


def lookup(kind: str, name: str) -> Entry:
    try:
        return fedcore.plugins.lookup(name, kind=kind)
    except FedcoreError as exc:
        raise ConfigError(f"{kind} = {name!r}: {str(exc).splitlines()[0]}") from None


def load_object(path: str) -> Any:
    """``"module:attr"`` -> the object (an executor class, a runtime factory)."""
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load {path}: {exc}") from None


def load_executor_class(name: str) -> type:
    """The executor class registered as ``name`` (``registry.add_executor``: built-in ``inline`` and ``ray``)."""
    return lookup("executor", name).obj


def _plain(value: Any) -> Any:
    """A value TOML can hold: tuples become arrays, ``None`` entries are dropped."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value if v is not None]
    return value


def component_spec(component: Any) -> dict[str, Any]:
    entry = fedcore.plugins.registry().find(component)
    name = entry.name if entry else f"{type(component).__module__}.{type(component).__qualname__}"
    return {"name": name, **_plain(settings_of(component))}


def resolve_pipeline(config: Mapping[str, Any], pipeline: Pipeline) -> dict[str, Any]:
    """Every slot's provider (defaults included) and every plugin, with all their settings."""
    given = list(pipeline.components)
    n_plugins = len(config.get("plugins", []))
    out: dict[str, Any] = {}
    slot_components = iter(given[n_plugins:])
    for slot in SLOT_HOOKS:
        if slot in config:
            out[slot] = component_spec(next(slot_components))
        else:
            provider = pipeline.provider(slot)
            if any(provider is c for c in given[:n_plugins]):
                continue  # a plugin in `plugins` fills this slot
            out[slot] = component_spec(provider)
    if n_plugins:
        out["plugins"] = [component_spec(c) for c in given[:n_plugins]]
    return out


@attrs.frozen(kw_only=True, eq=False)
class Plan:
    """A checked config: the pipeline, the factories by name, and the resolved config (defaults filled in)."""

    config: dict[str, Any]
    pipeline: Pipeline
    dataset: Entry
    dataset_settings: dict[str, Any]
    model: Entry
    model_settings: dict[str, Any]
    lora: LoRAConfig | None = None
    """``[model.lora]``: attached to the built model for the components that inject the adapters."""
    executor_class: type
    executor_settings: dict[str, Any]
    resolved: dict[str, Any]

    @property
    def name(self) -> str:
        return self.resolved["name"]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.resolved)


def fingerprint(resolved: Mapping[str, Any]) -> str:
    """A hash of what determines the results (not the name, executor, checkpoint or output options)."""
    keys = list(RESULT_KEYS) + sorted(tables())
    core = {k: resolved.get(k) for k in keys if k in resolved}
    if core.get("precision") == "fp32":  # the default: fingerprints of runs from before the key existed still match
        del core["precision"]
    if core.get("update_norm_bound") == DEFAULT_BOUND:  # likewise
        del core["update_norm_bound"]
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:16]


def expand_recipe(name: str | None, pipeline: Mapping[str, Any]) -> dict[str, Any]:
    """The pipeline table with the recipe (top-level ``recipe`` or ``pipeline.recipe``) written out in full,
    so the resolved config names every component and reproduces the run on its own."""
    pipeline = dict(pipeline)
    inner = pipeline.pop("recipe", None)
    if name is not None and inner is not None and inner != name:
        raise ConfigError(f"recipe = {name!r} and pipeline.recipe = {inner!r} disagree; give one")
    name = name if name is not None else inner
    if name is None:
        return pipeline
    return get_recipe(name).config(pipeline)


def plan(given: Mapping[str, Any]) -> Plan:
    """Check every name and setting in a validated config without loading data or building a model."""
    cfg = copy.deepcopy(dict(given))
    try:
        cfg["pipeline"] = expand_recipe(cfg.get("recipe"), cfg["pipeline"])
        pipeline = Pipeline.from_config(cfg["pipeline"])
    except FedcoreError as exc:
        raise ConfigError(f"pipeline: {str(exc).splitlines()[0]}") from None
    ds_name, ds_settings = split_spec(cfg["dataset"])
    ds_entry = lookup("dataset", ds_name)
    ds_settings = check_settings(ds_entry.obj, ds_settings, f"dataset {ds_name}")
    m_name, m_settings = split_spec(cfg["model"])
    m_entry = lookup("model", m_name)
    lora = LoRAConfig.from_table(m_settings.pop("lora")) if "lora" in m_settings else None
    given_model = set(m_settings)
    m_settings = check_settings(m_entry.obj, m_settings, f"model {m_name}")
    if "head_seed" in m_settings and "head_seed" not in given_model:
        m_settings["head_seed"] = cfg["seed"]  # a fresh head is part of the run's seeded start, like the split
    Placement.resolve(device=cfg["device"], precision=cfg["precision"],  # a device this machine lacks: one line
                      components=pipeline.components)
    ex_name, ex_settings = split_spec(cfg["executor"])
    ex_class = load_executor_class(ex_name)
    ex_settings = check_settings(ex_class, ex_settings, f"executor {ex_name}")
    if cfg["output"]["tensorboard"]:
        try:
            importlib.import_module("torch.utils.tensorboard")
        except ImportError as exc:
            raise ConfigError(f"output.tensorboard = true needs the tensorboard package ({exc}); "
                              f"pip install tensorboard") from None
    if lora is not None and not any(applies_model_lora(c) for c in pipeline.components):
        raise ConfigError("model.lora: no component of this pipeline applies LoRA adapters; use a LoRA recipe "
                          "(recipe = \"fedlora\" or \"sa-fedlora\") or split = \"lora-share\"")
    resolved = dict(cfg)
    resolved["dataset"] = {"name": ds_name, **_plain(ds_settings)}
    resolved["model"] = model_spec(m_name, m_settings, lora)
    resolved["executor"] = {"name": ex_name, **_plain(ex_settings)}
    resolved["pipeline"] = resolve_pipeline(cfg["pipeline"], pipeline)
    return Plan(config=cfg, pipeline=pipeline, dataset=ds_entry, dataset_settings=ds_settings, model=m_entry,
                model_settings=m_settings, lora=lora, executor_class=ex_class, executor_settings=ex_settings,
                resolved=resolved)


def model_spec(name: str, settings: Mapping[str, Any], lora: LoRAConfig | None) -> dict[str, Any]:
    """The resolved ``model`` table: the factory's settings, then ``lora`` (``[model.lora]``) when given."""
    spec = {"name": name, **_plain(settings)}
    if lora is not None:
        spec["lora"] = lora.as_table()
    return spec


def table_kwargs(cfg: Mapping[str, Any], train: Any, test: Any, num_clients: int | None = None) -> dict[str, Any]:
    """Keyword arguments for :meth:`fedcore.Pipeline.run` from the config's extension tables (clock, profiles, ...)."""
    out: dict[str, Any] = {}
    context = {"seed": cfg["seed"], "num_clients": num_clients or cfg["num_clients"], "train": train, "test": test}
    for name, ext in tables().items():
        if name in cfg and ext.build is not None:
            try:
                out.update(ext.build(cfg[name], context))
            except (TypeError, ValueError, FedcoreError) as exc:
                raise ConfigError(f"{name}: {str(exc).splitlines()[0]}") from None
    return out


@attrs.frozen(kw_only=True, eq=False)
class Materials:
    """What :meth:`fedcore.Pipeline.run` is called with."""

    plan: Plan
    train: Any
    test: Any
    model: torch.nn.Module
    executor: Any
    run_kwargs: dict[str, Any]

    @property
    def resolved(self) -> dict[str, Any]:
        return self.plan.resolved


def seed_everything(seed: int) -> None:
    """Seed the global generators too, so code that (wrongly) draws from them is still reproducible."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def load_data(p: Plan) -> tuple[Any, Any]:
    """``(train, test)`` from the config's dataset factory; a missing file or a bad value is one line."""
    try:
        loaded = p.dataset.obj(**p.dataset_settings)
    except ImportError as exc:  # a plugin's factory imports its libraries when it builds: name the plugin
        raise ConfigError(fedcore.plugins.missing_library(p.dataset, exc)) from None
    except FileNotFoundError as exc:
        raise ConfigError(f"dataset {p.dataset.name}: file not found: {exc.filename or exc}") from None
    except (TypeError, ValueError, OSError, FedcoreError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"dataset {p.dataset.name}: {reason}") from None
    return loaded if isinstance(loaded, tuple) else (loaded, None)


def model_settings_for(p: Plan, train: Any) -> dict[str, Any]:
    """The model factory's settings: the config's, with ``num_classes`` and ``classnames`` from the training set
    unless the config gives them."""
    model_settings = dict(p.model_settings)
    given = {k: v for k, v in split_spec(p.config["model"])[1].items() if k != "lora"}
    takes = factory_defaults(p.model.obj)[0]
    if "num_classes" in takes and "num_classes" not in given:
        classes = getattr(train, "num_classes", None) or len(getattr(train, "classes", []) or [])
        if classes:
            model_settings["num_classes"] = int(classes)  # the dataset's, unless the config says otherwise
    if "classnames" in takes and "classnames" not in given and getattr(train, "classes", None):
        model_settings["classnames"] = [str(c) for c in train.classes]  # a prompted model names the classes
    return model_settings


def build_model(p: Plan, settings: Mapping[str, Any]) -> torch.nn.Module:
    """The model from its factory, seeded with the run's seed; a bad setting is one line."""
    seed_everything(p.config["seed"])
    try:
        model = p.model.obj(**settings)
    except ImportError as exc:  # a plugin's factory imports its libraries when it builds: name the plugin
        raise ConfigError(fedcore.plugins.missing_library(p.model, exc)) from None
    except FedcoreError as exc:  # fedcore's own message already names the setting
        raise ConfigError(f"model {p.model.name}: {str(exc).splitlines()[0]}") from None
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:  # a library's, e.g. hidden = -5: show them
        shown = ", ".join(f"{k} = {v!r}" for k, v in settings.items() if isinstance(v, (int, float, str, bool)))
        raise ConfigError(f"model {p.model.name} ({shown}): {str(exc).splitlines()[0]}") from None
    if p.lora is not None:  # [model.lora] travels with the model to the component that injects it
        attach_lora(model, p.lora)
    return model


def materialize(p: Plan) -> Materials:
    """Load the dataset, build the model and the executor. Errors (a missing file, a bad value) are one line."""
    cfg = p.config
    train, test = load_data(p)
    model_settings = model_settings_for(p, train)
    if cfg["threads"] > 0:  # the thread count changes float reduction order: part of the fingerprint
        torch.set_num_threads(cfg["threads"])
    model = build_model(p, model_settings)
    p.resolved["model"] = model_spec(p.model.name, model_settings, p.lora)
    try:  # a dataset that makes model inputs per batch (hf images) takes the model's input config now
        train, test = (d.for_model(model) if hasattr(d, "for_model") else d for d in (train, test))
    except (TypeError, ValueError, FedcoreError) as exc:
        raise ConfigError(f"dataset {p.dataset.name}: {str(exc).splitlines()[0]}") from None
    try:
        executor = p.executor_class(**p.executor_settings)
    except (TypeError, ValueError, FedcoreError) as exc:
        raise ConfigError(f"executor {p.resolved['executor']['name']}: {str(exc).splitlines()[0]}") from None
    run_kwargs: dict[str, Any] = dict(num_clients=cfg["num_clients"], rounds=cfg["rounds"], seed=cfg["seed"],
                                      eval_every=cfg["eval_every"], device=cfg["device"],
                                      precision=cfg["precision"], client_metrics=cfg["output"]["client_metrics"],
                                      update_norm_bound=float(cfg["update_norm_bound"]))
    run_kwargs.update(table_kwargs(cfg, train, test))
    if len(train) < cfg["num_clients"]:
        raise ConfigError(f"num_clients = {cfg['num_clients']} is more than the {len(train)} training samples of "
                          f"dataset {p.dataset.name}")
    return Materials(plan=p, train=train, test=test, model=model, executor=executor, run_kwargs=run_kwargs)
