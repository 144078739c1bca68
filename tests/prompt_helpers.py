"""Shared tiny objects for the prompt tests: one random-initialised tiny CLIP per process (it is frozen)."""
from __future__ import annotations

from functools import lru_cache

from fedcore.prompt import FrozenCLIP, load_backbone, prompted_clip
from fedcore.prompt.captioned import shapes_dataset
from fedcore.testing import ContractFixture, tiny_data


@lru_cache(maxsize=None)
def tiny_backbone(seed: int = 0) -> FrozenCLIP:
    return load_backbone("fedcore-tiny-clip", seed=seed)


def tiny_prompted(num_classes: int = 4, **kw):
    return prompted_clip(tiny_backbone(), [f"class{i}" for i in range(num_classes)], n_ctx=kw.pop("n_ctx", 4), **kw)


def shapes_data(n_train: int = 8, n_test: int = 3, classes: int = 6):
    from fedcore.prompt.captioned import downstream

    train = shapes_dataset(n_train, stream="t-train", noise=0.2)
    test = shapes_dataset(n_test, stream="t-test", noise=0.2)
    keep_tr = [i for i in range(len(train)) if int(train.y[i]) < classes]
    keep_te = [i for i in range(len(test)) if int(test.y[i]) < classes]
    tr, te = train.subset(keep_tr), test.subset(keep_te)
    tr.classes = te.classes = train.classes[:classes]
    return tr, te


def shapes_prompted(classes: int = 6, **kw):
    return prompted_clip(tiny_backbone(), shapes_data(classes=classes)[0].classes, n_ctx=kw.pop("n_ctx", 4), **kw)


PROMPT_FIXTURE = ContractFixture(model_factory=tiny_prompted, data_factory=tiny_data)
