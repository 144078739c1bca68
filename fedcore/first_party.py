"""Which first-party distribution provides which name, so a missing one can say what to install.

The core registers only its built-in components. Split learning, LoRA and CLIP prompts are their own
distributions under ``substrates/``, the methods live under ``plugins/``; when one of them is not installed,
its names are unknown to the catalogue. This index (checked against the real registrations by the test
suite) turns "unknown component 'lora-share'" into "install fedcore-lora". Data only: importing it imports
nothing else.
"""
from __future__ import annotations

from collections.abc import Mapping

# distribution -> (import package, {kind: names it registers})
DISTRIBUTIONS: Mapping[str, tuple[str, Mapping[str, tuple[str, ...]]]] = {
    "fedcore-split": ("fedcore_split", {"component": ("split-share", "split-train", "sl-turns", "split-eval"),
                                        "recipe": ("sl", "splitfed-v1", "splitfed-v2")}),
    "fedcore-lora": ("fedcore_lora", {"component": ("lora-share", "staleness-mean", "lora-product-svd")}),
    "fedcore-clip": ("fedcore_clip", {"component": ("prompt-share", "prompt-eval", "vectorised-prompt"),
                                      "model": ("open_clip", "prompted-clip"),
                                      "dataset": ("clip.shapes", "clip.digits")}),
    "fedcore-fedv": ("fedcore_fedv", {"component": ("fedv-share", "fedv-train", "paired-test", "local-model-eval"),
                                      "recipe": ("fedv", "fedvz")}),
    "fedcore-safedlora": ("fedcore_safedlora", {
        "component": ("sa-fedlora-plan", "sa-fedlora-share", "sa-fedlora-sgd", "full-share", "bitfit-share",
                      "local-share", "from-scratch", "safedlora-sgd", "personal-sgd"),
        "recipe": ("sa-fedlora", "fedlora", "fedfft", "fedavg-scratch", "fedbit", "fedper", "local"),
        "model": ("safedlora.micro-vit-pretrained",), "dataset": ("safedlora.digits-target",)}),
    "fedcore-promptfl": ("fedcore_promptfl", {"component": ("promptfl", "classifier-eval"),
                                              "model": ("clip-image-classifier",),
                                              "recipe": ("promptfl", "promptfl-finetune")}),
    "fedcore-pfedprompt": ("fedcore_pfedprompt", {
        "component": ("pfedprompt", "promptfl-ft", "promptper", "promptprox", "promptamp", "personal-prompt-eval"),
        "recipe": ("pfedprompt", "promptfl-ft", "promptper", "promptprox", "promptamp")}),
    "fedcore-cafpt": ("fedcore_cafpt", {"component": ("cafpt",), "recipe": ("cafpt",), "table": ("label_noise",)}),
    "fedcore-pruning": ("fedcore_pruning", {"component": ("submodel-share", "submodel-train", "masked-delta")}),
    "fedcore-fedrolex": ("fedcore_fedrolex", {"recipe": ("fedrolex",)}),
    "fedcore-heterofl": ("fedcore_heterofl", {"recipe": ("heterofl",)}),
    "fedcore-treelearning": ("fedcore_treelearning", {
        "component": ("tl-share", "tl-cohort", "tl-eval", "tl-vertical"),
        "recipe": ("tree-learning", "tl-optimal-split", "tl-no-partition", "sl-sync", "sl-round-robin",
                   "tree-learning-vertical"),
        "model": ("tl.mobilenet",)}),
    "fedcore-distill": ("fedcore_distill", {
        "component": ("edge-kd-train", "edge-share", "kd-eval", "kd-server", "p-group"),
        "dataset": ("kd.synth-patterns",),
        "model": ("kd.edge", "kd.fedavg-cnn", "kd.fedavg-vit", "kd.fedgkt", "kd.fedvkd")}),
    "fedcore-fedvkd": ("fedcore_fedvkd", {"recipe": ("fedavg-cnn", "fedavg-edge", "fedavg-vit", "fedvkd")}),
    "fedcore-fedgkt": ("fedcore_fedgkt", {"recipe": ("fedgkt",)}),
    "fedcore-optim": ("fedcore_optim", {"component": ("fedavgm", "fedadam", "fedyogi", "fedadagrad"),
                                        "recipe": ("fedavgm", "fedadam", "fedyogi", "fedadagrad")}),
    "fedcore-personal": ("fedcore_personal", {
        "component": ("fedper-share", "fedbn-share", "keep-personal", "fedrep-sgd", "ditto-sgd", "personal-eval"),
        "recipe": ("fedper-head", "fedrep", "fedbn", "ditto")}),
    "fedcore-drift": ("fedcore_drift", {
        "component": ("scaffold-sgd", "scaffold", "fednova-sgd", "fednova", "feddyn-sgd", "feddyn"),
        "recipe": ("scaffold", "fednova", "feddyn")}),
    "fedcore-fair": ("fedcore_fair", {"component": ("qffl", "qffl-loss"), "recipe": ("qffl",)}),
    "fedcore-cos2p": ("fedcore_cos2p", {"component": ("cos2p-share", "cos2p-update", "cos2p-aggregate", "cos2p-quotas"),
                                        "recipe": ("co-s2p", "co-s2p-async", "co-s2p-sync")}),
    "fedcore-dp": ("fedcore_dp", {"component": ("dp-fedavg", "dp-sgd"),
                                  "recipe": ("dp-fedavg", "dp-fedavg-adaptive", "dp-sgd")}),
    "fedcore-secagg": ("fedcore_secagg", {"component": ("secagg",), "recipe": ("secagg-fedavg", "secagg-dp-fedavg")}),
}
"""``fedcore-robust`` is left out on purpose: it stands for a third-party plugin, whose names the core cannot know."""

PACKAGES: dict[str, str] = {name: dist for dist, (_, kinds) in DISTRIBUTIONS.items()
                            for names in kinds.values() for name in names}
"""Component, recipe, model and dataset name -> the first-party distribution that registers it (names are distinct
across kinds)."""


def provider(name: str, kind: str = "component") -> str | None:
    """The first-party distribution that registers ``name`` as a ``kind``, or None."""
    for dist, (_, names) in DISTRIBUTIONS.items():
        if name in names.get(kind, ()):
            return dist
    return None


def distribution_of(package: str) -> str | None:
    """The first-party distribution whose import package is ``package`` (or holds the module ``package``)."""
    top = package.partition(".")[0]
    for dist, (pkg, _) in DISTRIBUTIONS.items():
        if pkg == top:
            return dist
    return None
