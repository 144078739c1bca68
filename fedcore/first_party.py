"""Names offered by the project's own distributions, so that naming one that is not installed says what to install.

A plain dict, name -> distribution, kept by hand: the catalogue only knows what is installed, and this is
what it cannot know. ``fedcore-robust`` is left out on purpose: it stands for a third-party plugin (the
test fixture of a plugin written against the public API), whose names the core cannot know. Components, models and datasets share one namespace per kind, but their names are
distinct across kinds, so one dict serves them all. A test checks it against every in-repo plugin.
"""
from __future__ import annotations

PACKAGES: dict[str, str] = {
    # substrates (in-repo distributions that method plugins build on)
    "sl": "fedcore-split",
    "splitfed-v1": "fedcore-split",
    "splitfed-v2": "fedcore-split",
    "split-eval": "fedcore-split",
    "lora-share": "fedcore-lora",
    "prompt-share": "fedcore-clip",
    # method plugins
    "cafpt": "fedcore-cafpt",
    "fedv": "fedcore-fedv",
    "fedvz": "fedcore-fedv",
    "paired-test": "fedcore-fedv",
    "pfedprompt": "fedcore-pfedprompt",
    "promptfl-ft": "fedcore-pfedprompt",
    "promptper": "fedcore-pfedprompt",
    "promptprox": "fedcore-pfedprompt",
    "promptamp": "fedcore-pfedprompt",
    "personal-prompt-eval": "fedcore-pfedprompt",
    "promptfl": "fedcore-promptfl",
    "prompt-eval": "fedcore-promptfl",
    "prompted-clip": "fedcore-promptfl",
    "clip-image-classifier": "fedcore-promptfl",
    "sa-fedlora": "fedcore-safedlora",
    "fedlora": "fedcore-safedlora",
    "fedfft": "fedcore-safedlora",
    "fedavg-scratch": "fedcore-safedlora",
    "fedbit": "fedcore-safedlora",
    "fedper": "fedcore-safedlora",
    "local": "fedcore-safedlora",
    "personal-eval": "fedcore-safedlora",
    "safedlora.micro-vit-pretrained": "fedcore-safedlora",
    "safedlora.digits-target": "fedcore-safedlora",
}
"""Component, model and dataset name -> the first-party distribution that registers it."""
