"""What a config can name: the ``prompted-clip`` model (random, fedcore-pre-trained or open_clip weights) and the
captioned data sets ``clip.shapes`` / ``clip.digits``.

    model = { name = "prompted-clip", pretrained = "fedcore-shapes", n_ctx = 16 }   # fedcore's tiny CLIP
    model = { name = "prompted-clip", arch = "ViT-B-32", pretrained = "openai" }    # real weights, if you have them
    dataset = { name = "clip.shapes" }

``classnames`` default to the data set's class names (the experiment builder fills them in).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedcore.errors import ConfigError

FEDCORE_PRETRAINED = {"fedcore-shapes": "shapes", "fedcore-digits": "digits"}
"""``pretrained`` tags of fedcore's own tiny CLIP: contrastively pre-trained by fedcore (cached, deterministic)."""


def load_clip(arch: str, pretrained: str | None, *, seed: int = 0, pretrain_steps: int = 1500,
              pretrain_seed: int = 0) -> Any:
    """The frozen backbone: random weights (``None``), fedcore's pre-trained tiny CLIP (``fedcore-shapes`` /
    ``fedcore-digits``: built once, then cached), or an open_clip pretrained tag or checkpoint file."""
    from fedcore_clip.backbone import TINY, check_architecture, load_backbone

    check_architecture(arch)
    if pretrained is None:
        return load_backbone(arch, seed=seed)
    if pretrained in FEDCORE_PRETRAINED:
        if arch != TINY:
            raise ConfigError(f"prompted-clip: pretrained = {pretrained!r} is fedcore's own {TINY}; "
                              f"got arch = {arch!r}")
        from fedcore_clip.pretrain import load_pretrained

        return load_pretrained(FEDCORE_PRETRAINED[pretrained], seed=pretrain_seed, steps=pretrain_steps)[0]
    import open_clip

    tags = list(open_clip.list_pretrained_tags_by_model(arch))
    if pretrained not in tags and not Path(pretrained).is_file():
        known = ", ".join([*tags, *FEDCORE_PRETRAINED] if arch == TINY else tags) or "none"
        raise ConfigError(f"prompted-clip: pretrained = {pretrained!r} is neither a tag of open_clip "
                          f"architecture {arch!r} ({known}) nor a checkpoint file")
    if pretrained in tags:  # fetch (or find in the cache) the checkpoint before building the model
        try:
            open_clip.download_pretrained(open_clip.get_pretrained_cfg(arch, pretrained))
        except Exception as exc:  # noqa: BLE001 - download/IO errors of open_clip and huggingface_hub, any type
            reason = (str(exc).strip().splitlines() or [""])[0].split(". ")[0]
            raise ConfigError(f"prompted-clip: open_clip weights {arch}/{pretrained} are not available here "
                              f"({type(exc).__name__}: {reason[:120]}); put them in the Hugging Face cache or give "
                              f"a checkpoint file") from None
    return load_backbone(arch, pretrained=pretrained, seed=seed)


def prompted_clip_model(*, classnames: Sequence[str] | None = None, arch: str = "fedcore-tiny-clip",
                        pretrained: str | None = None, seed: int = 0, head_seed: int = 0,
                        pretrain_steps: int = 1500, pretrain_seed: int = 0, **prompt: Any) -> Any:
    """A frozen open_clip CLIP with a CoOp prompt for ``classnames`` (any architecture; ``pretrained``: None for
    random weights, ``fedcore-shapes``/``fedcore-digits`` for fedcore's pre-trained tiny CLIP, or an open_clip tag).

    ``seed`` draws a random backbone; ``head_seed`` the fresh prompt (the trainable part, like a pre-trained
    model's new head): a config fills in the run's seed, so each seed of a sweep starts from its own prompt."""
    from fedcore_clip.learner import prompted_clip

    if not classnames:
        raise ConfigError("prompted-clip needs classnames (a config takes them from the data set's classes)")
    backbone = load_clip(arch, pretrained, seed=seed, pretrain_steps=pretrain_steps, pretrain_seed=pretrain_seed)
    return prompted_clip(backbone, list(classnames), seed=head_seed, **prompt)


def shapes(*, n_train_per_class: int = 60, n_test_per_class: int = 20, num_classes: int = 30, seed: int = 0):
    """Coloured synthetic shapes named "red circle", ..., the prompt methods' downstream task: (train, test)."""
    from fedcore_clip.captioned import downstream

    train, test = downstream("shapes", seed=seed, n_train_per_class=n_train_per_class,
                             n_test_per_class=n_test_per_class)
    if not 1 <= num_classes <= len(train.classes):
        raise ValueError(f"num_classes = {num_classes}; choose 1..{len(train.classes)}")
    return _first_classes(train, num_classes), _first_classes(test, num_classes)


def digits(*, seed: int = 0):
    """The embedded 8x8 digits named "zero".."nine", noisier than the pre-training half: (train, test)."""
    from fedcore_clip.captioned import downstream

    return downstream("digits", seed=seed)


def _first_classes(ds: Any, k: int) -> Any:
    if k == len(ds.classes):
        return ds
    out = ds.subset([i for i in range(len(ds)) if int(ds.y[i]) < k])
    out.classes = list(ds.classes[:k])
    return out


TEST_SETUP: dict[str, Any] = {
    "dataset": {"name": "clip.shapes", "n_train_per_class": 8, "n_test_per_class": 2, "num_classes": 6},
    "model": {"name": "prompted-clip", "n_ctx": 4},
    "num_clients": 3,
    "pipeline": {"partition": {"shots": 2, "classes_per_client": 2}, "local_update": {"epochs": 1}},
}
"""A prompt recipe's micro run (``Recipe.test_setup``): the random-weight tiny CLIP, 6 shape classes, 3 clients."""
