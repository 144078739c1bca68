"""What a config can name: the ``open_clip`` model (a frozen open_clip CLIP with a CoOp prompt; random,
fedcore-pre-trained or open_clip weights) and the captioned data sets ``clip.shapes`` / ``clip.digits``.

    model = { name = "open_clip", pretrained = "fedcore-shapes", n_ctx = 16 }        # fedcore's tiny CLIP
    model = { name = "open_clip", arch = "ViT-B-16", pretrained = "openai" }         # open_clip's weights
    model = { name = "open_clip", arch = "ViT-B-16", pretrained = "ckpt/vit_b16.safetensors" }
    dataset = { name = "clip.shapes" }

``classnames`` default to the data set's class names (the experiment builder fills them in). ``open_clip`` is
the one name of a CLIP model: ``arch`` + ``pretrained`` mean the same in ``clip-image-classifier`` (the
fine-tune baselines, which share :func:`load_clip`). ``prompted-clip``, its name before 0.1.1, still works with a
``DeprecationWarning`` until 1.0.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
import functools
from pathlib import Path
import pickle
from typing import Any
import warnings

from fedcore.errors import ConfigError
from fedcore.models.weights import first_line, hub_locations, looks_like_file, offline_hint, read_weights, weights_path
from fedcore.settings import settings_help

FEDCORE_PRETRAINED = {"fedcore-shapes": "shapes", "fedcore-digits": "digits"}
"""``pretrained`` tags of fedcore's own tiny CLIP: contrastively pre-trained by fedcore (cached, deterministic)."""


def load_clip(arch: str, pretrained: str | bool | None, *, seed: int = 0, pretrain_steps: int = 1500,
              pretrain_seed: int = 0, model: str = "open_clip") -> Any:
    """The frozen backbone: random weights (``None`` or ``False``), fedcore's pre-trained tiny CLIP
    (``fedcore-shapes`` / ``fedcore-digits``: built once, then cached), an open_clip pretrained tag (from the
    Hugging Face cache, or downloaded where there is a network) or a checkpoint file (read by open_clip with
    ``torch.load(weights_only=True)``: no code from the file runs). ``model`` names the registered model in
    error messages; every failure is one line."""
    from fedcore_clip.backbone import TINY, check_architecture, load_backbone

    check_architecture(arch)
    if pretrained is None or pretrained is False:
        return load_backbone(arch, seed=seed)
    if not isinstance(pretrained, str):
        raise ConfigError(f"{model}: pretrained = {pretrained!r}; give an open_clip tag, a checkpoint file or false")
    if pretrained in FEDCORE_PRETRAINED:
        if arch != TINY:
            raise ConfigError(f"{model}: pretrained = {pretrained!r} is fedcore's own {TINY}; "
                              f"got arch = {arch!r}")
        from fedcore_clip.pretrain import load_pretrained

        return load_pretrained(FEDCORE_PRETRAINED[pretrained], seed=pretrain_seed, steps=pretrain_steps)[0]
    import open_clip

    tags = list(open_clip.list_pretrained_tags_by_model(arch))
    if pretrained in tags:  # fetch (or find in the cache) the checkpoint before building the model
        cfg = open_clip.get_pretrained_cfg(arch, pretrained)
        try:
            open_clip.download_pretrained(cfg)
        except Exception as exc:  # noqa: BLE001 - download/IO errors of open_clip and huggingface_hub, any type
            raise ConfigError(f"{model}: pretrained weights {arch}/{pretrained} of open_clip are neither cached nor "
                              f"reachable: "
                              f"looked in {_where(cfg)} ({first_line(exc)}; {offline_hint()}); put them there "
                              f"or give a checkpoint file (pretrained = \"path/to/checkpoint.safetensors\")") from None
        return load_backbone(arch, pretrained=pretrained, seed=seed)
    if not looks_like_file(pretrained):
        known = ", ".join([*tags, *FEDCORE_PRETRAINED] if arch == TINY else tags) or "none"
        raise ConfigError(f"{model}: pretrained = {pretrained!r} is neither a tag of open_clip "
                          f"architecture {arch!r} ({known}) nor a checkpoint file")
    path = weights_path(pretrained)  # a missing file: one line with its path
    try:
        return load_backbone(arch, pretrained=str(path), seed=seed)
    except pickle.UnpicklingError:
        read_weights(path)  # raises the one line that says why the file was refused
        raise
    except RuntimeError as exc:  # load_state_dict's key and shape lists span many lines
        raise ConfigError(f"{model}: the checkpoint {path} does not fit open_clip {arch}: "
                          f"{' '.join(str(exc).split())[:240]}") from None


def _where(cfg: Mapping[str, Any]) -> str:
    """Where ``open_clip.download_pretrained(cfg)`` looks: the Hugging Face hub cache for a hub entry, else its
    URL cache (``~/.cache/clip``)."""
    caches = hub_locations()
    if cfg.get("hf_hub") and "hf" in caches:
        return f"the Hugging Face hub cache {caches['hf']} for {cfg['hf_hub'].rstrip('/')}"
    return f"open_clip's download cache {Path('~/.cache/clip').expanduser()} for {Path(str(cfg.get('url'))).name}"


@settings_help(
    arch="an open_clip architecture (open_clip.list_models(): \"ViT-B-16\", \"RN50\", ...) or fedcore's micro "
         "\"fedcore-tiny-clip\"",
    pretrained="an open_clip tag (\"openai\", \"laion2b_s34b_b88k\"; from the Hugging Face cache or the hub), a "
               "checkpoint file (.safetensors/.pt/.bin, no code runs), \"fedcore-shapes\"/\"fedcore-digits\" "
               "(fedcore's pre-trained tiny CLIP), or unset/false for random weights",
    classnames="the prompt's classes (a config takes the data set's class names)",
    seed="draws a random backbone's weights",
    head_seed="draws the prompt's initialisation (a config uses the run's seed)",
    pretrain_steps="steps of fedcore's own tiny-CLIP pre-training (fedcore-shapes / fedcore-digits)",
    pretrain_seed="seed of fedcore's own tiny-CLIP pre-training",
    prompt="CoOp prompt settings: n_ctx, position, csc, init, init_std, n_personal",
)
def prompted_clip_model(*, classnames: Sequence[str] | None = None, arch: str = "fedcore-tiny-clip",
                        pretrained: str | bool | None = None, seed: int = 0, head_seed: int = 0,
                        pretrain_steps: int = 1500,
                        pretrain_seed: int = 0, **prompt: Any) -> Any:
    """A frozen open_clip CLIP with a CoOp prompt for ``classnames`` (any architecture; ``pretrained``: None for
    random weights, ``fedcore-shapes``/``fedcore-digits`` for fedcore's pre-trained tiny CLIP, an open_clip tag or a
    checkpoint file). Registered as ``open_clip``.

    ``seed`` draws a random backbone's weights, ``head_seed`` the prompt's initialisation: the model's fresh
    trainable part, which a config draws from the run's seed (so seed s of a sweep is a replicate)."""
    from fedcore_clip.learner import prompted_clip

    if not classnames:
        raise ConfigError("open_clip needs classnames (a config takes them from the data set's classes)")
    backbone = load_clip(arch, pretrained, seed=seed, pretrain_steps=pretrain_steps, pretrain_seed=pretrain_seed)
    return prompted_clip(backbone, list(classnames), seed=head_seed, **prompt)


@functools.wraps(prompted_clip_model, assigned=())  # its signature and help, its own docstring
def deprecated_prompted_clip(**settings: Any) -> Any:
    """``prompted-clip``: the ``open_clip`` model under its name before 0.1.1 (same settings; removed in 1.0)."""
    warnings.warn("model = \"prompted-clip\" is now called \"open_clip\" (same settings); the old name goes in "
                  "fedcore 1.0", DeprecationWarning, stacklevel=2)
    return prompted_clip_model(**settings)


def shapes(*, n_train_per_class: int = 60, n_test_per_class: int = 20, num_classes: int = 30,
           classes: Sequence[str] | None = None, names: Sequence[str] | None = None, seed: int = 0):
    """Coloured synthetic shapes named "red circle", ..., the prompt methods' downstream task: (train, test).

    ``classes`` keeps these classes, in this order (default: the first ``num_classes``); ``names`` gives them the
    names the task's labels go by (default: their own). Names the tiny CLIP never read in pre-training make its
    zero-shot prompt useless, so a prompt must learn the classes from the shots (the prompt recipes' learning
    check, :data:`LEARNING_SETUP`)."""
    from fedcore_clip.captioned import downstream

    train, test = downstream("shapes", seed=seed, n_train_per_class=n_train_per_class,
                             n_test_per_class=n_test_per_class)
    if classes is None:
        if not 1 <= num_classes <= len(train.classes):
            raise ConfigError(f"clip.shapes: num_classes = {num_classes}; choose 1..{len(train.classes)}")
        keep = list(range(num_classes))
    else:
        unknown = [c for c in classes if c not in train.classes]
        if unknown or not classes or len(set(classes)) != len(classes):
            raise ConfigError(f"clip.shapes: classes = {list(classes)!r}; give distinct names among: "
                              f"{', '.join(train.classes)}")
        keep = [train.classes.index(c) for c in classes]
    labels = [str(n) for n in names] if names is not None else [train.classes[k] for k in keep]
    if len(labels) != len(keep) or len(set(labels)) != len(labels):
        raise ConfigError(f"clip.shapes: names = {list(labels)!r}; give {len(keep)} distinct names, one per class")
    return _pick_classes(train, keep, labels), _pick_classes(test, keep, labels)


def digits(*, seed: int = 0):
    """The embedded 8x8 digits named "zero".."nine", noisier than the pre-training half: (train, test)."""
    from fedcore_clip.captioned import downstream

    return downstream("digits", seed=seed)


def _pick_classes(ds: Any, keep: Sequence[int], names: Sequence[str]) -> Any:
    """``ds`` restricted to the classes ``keep``, relabelled 0..len(keep)-1 in that order and named ``names``."""
    import torch

    from fedcore.data import ArrayDataset

    if list(keep) == list(range(len(ds.classes))) and list(names) == list(ds.classes):
        return ds
    new_label = {old: i for i, old in enumerate(keep)}
    rows = [i for i in range(len(ds)) if int(ds.y[i]) in new_label]
    return ArrayDataset(ds.x[rows], torch.as_tensor([new_label[int(ds.y[i])] for i in rows]), list(names))


TEST_SETUP: dict[str, Any] = {
    "dataset": {"name": "clip.shapes", "n_train_per_class": 8, "n_test_per_class": 2, "num_classes": 6},
    "model": {"name": "open_clip", "n_ctx": 4},
    "num_clients": 3,
    "pipeline": {"partition": {"shots": 2, "classes_per_client": 2}, "local_update": {"epochs": 2, "lr": 0.05}},
}
"""A prompt recipe's micro run (``Recipe.test_setup``): the random-weight tiny CLIP, 6 shape classes, 3 clients, two
local epochs (two steps: a proximal term only acts from the second) at a learning rate that moves the prompt."""

LEARNING_CLASSES = ("red circle", "green square", "blue triangle", "yellow cross", "purple ring", "cyan circle")
"""The learning check's six classes: one per colour, each a different shape. The 200-step tiny CLIP's frozen image
features separate them (a class-mean prototype of 2 shots scores 97.5 % on their test images); they do not separate
the shapes of one colour (the first six classes, five red shapes: a probe on 60 shots a class reaches 46-54 %, below
the hand-written prompt's 51.7 %), and no prompt, which only moves the text side, can pass that ceiling."""

UNSEEN_NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
"""The names the learning check's classes go by: words no pre-training caption contains (tested), so the text
tower has never tied them to an image and the untrained prompt is at chance. The prompt must learn each name's
class from the shots; with the real names the zero-shot prompt already scores 95.8-97.5 % on these classes and
leaves no room to learn (``plugins/fedcore-promptfl/README.md``)."""

LEARNING_SETUP: dict[str, Any] = {
    "dataset": {"name": "clip.shapes", "n_train_per_class": 8, "n_test_per_class": 20,
                "classes": list(LEARNING_CLASSES), "names": list(UNSEEN_NAMES)},
    "model": {"name": "open_clip", "pretrained": "fedcore-shapes", "pretrain_steps": 200, "n_ctx": 8},
    "pipeline": {"partition": {"shots": 8}, "local_update": {"epochs": 5, "lr": 0.003}},
}
"""A prompt recipe's learning-check setup (``Recipe.learning["setup"]``, over :data:`TEST_SETUP`): fedcore's tiny
CLIP pre-trained for 200 steps on captioned shapes (built once, ~1.5 CPU minutes, then cached), the six
:data:`LEARNING_CLASSES` under :data:`UNSEEN_NAMES`, 8 shots a class, 120 test images, an 8-vector context, 5 local
epochs at SGD 0.003. Scaled from the thesis (CLIP ViT-B/16, 16 context vectors, real class names)."""

LEARNING: dict[str, Any] = {"rounds": 12, "margin": 0.3, "control": True, "setup": LEARNING_SETUP}
"""The prompt recipes' learning check: after 12 rounds the global prompt must beat both chance (1/6) and the
untrained prompt (the same run with a no-op local update) by 30 points. (PromptAMP's global prompt, the mean of
its clients' personalised ones, needs the 12: 42.5 % after 10 rounds, 87.5 % after 12; every prompt recipe is
67-88 % at 12 rounds and stays above the 46.7 % bar through round 20, as it was checked until issue 30.)"""
