"""Hugging Face datasets by name: hub ids, local folders, the parquet/csv/json/arrow/imagefolder/webdataset
builders, and folders written by ``save_to_disk``, as compact :class:`~fedcore.data.ImageDataset` pairs.

Loading goes through ``datasets.load_dataset_builder`` + ``download_and_prepare`` + ``as_dataset`` (what
``load_dataset`` does), so the builder is checked before any data file is read: only the packaged builders in
:data:`SAFE_BUILDERS` run, never a dataset script (``datasets`` >= 4 has none; older versions are refused) and
never the pickle-reading ``pandas`` builder. Images are decoded by fedcore with PIL restricted to
:data:`IMAGE_FORMATS` (no PostScript: PIL hands EPS files to Ghostscript). The HF cache and offline mode
(``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``) are ``datasets``' own; every failure is one ``ConfigError`` line
naming the dataset, what was looked for and where.
"""
from __future__ import annotations

from collections.abc import Mapping
import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.data.arrays import ArrayDataset
from fedcore.data.images import ArrowImages, ImageDataset, image_tensor
from fedcore.data.transform import TransformSettings
from fedcore.errors import ConfigError

SAFE_BUILDERS = ("arrow", "csv", "imagefolder", "json", "parquet", "webdataset")
"""Packaged ``datasets`` builders that read data without running code from it."""
IMAGE_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
"""Formats PIL may decode; anything else (EPS and PS run Ghostscript) is refused."""
SINGLE_CHANNEL = ("1", "L", "I", "I;16", "F")
DISK_MARKERS = ("dataset_dict.json", "state.json")
"""Files ``save_to_disk`` writes: a folder holding one is read with ``load_from_disk``."""


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ConfigError("the hf dataset needs the datasets package: pip install 'fedcore[hf]'") from None
    major = int(datasets.__version__.split(".")[0])
    if major < 4:
        raise ConfigError(f"the hf dataset needs datasets >= 4 (which never runs dataset scripts); installed: "
                          f"{datasets.__version__}")
    return datasets


class HFSource:
    """One dataset's splits, opened (prepared in the HF cache) but not decoded."""

    def __init__(self, *, path: str, subset: str | None = None, data_dir: str | None = None,
                 data_files: str | list[str] | Mapping[str, Any] | None = None, revision: str | None = None,
                 cache_dir: str | None = None) -> None:
        self.path = path
        self.where = f"path={path!r}" + (f", subset={subset!r}" if subset else "") + \
            (f", data_dir={data_dir!r}" if data_dir else "") + (f", data_files={data_files!r}" if data_files else "")
        self._refuse_scripts(path)
        local = Path(path).expanduser()
        if local.is_dir() and any((local / m).is_file() for m in DISK_MARKERS):
            given = [k for k, v in (("subset", subset), ("data_dir", data_dir), ("data_files", data_files),
                                    ("revision", revision)) if v]
            if given:
                raise ConfigError(f"{given[0]} does not apply to {path!r}, a folder written by save_to_disk")
            saved = self._guard(lambda: _datasets().load_from_disk(str(local)), None)
            # a DatasetDict is its splits; one Dataset saved on its own is the split "train"
            self._disk: dict[str, Any] | None = dict(saved) if hasattr(saved, "keys") else {"train": saved}
            self._builder = None
        else:
            self._disk = None
            self._builder = self._prepare(path, subset=subset, data_dir=data_dir, data_files=data_files,
                                          revision=revision, cache_dir=cache_dir)

    @property
    def splits(self) -> list[str]:
        if self._builder is not None:
            return sorted(self._builder.info.splits or {})
        return sorted(self._disk or {})

    def split(self, name: str) -> Any:
        """The ``datasets.Dataset`` of split ``name`` (slices such as ``train[:10%]`` allowed for builders)."""
        base = name.split("[", 1)[0]
        if base not in self.splits:
            raise ConfigError(f"split {base!r} not in {self.path}; available: {self.splits}")
        if self._builder is not None:
            return self._guard(lambda: self._builder.as_dataset(split=name), None)
        if name != base:
            raise ConfigError(f"split {name!r}: slices are not available for a save_to_disk folder")
        assert self._disk is not None
        return self._disk[base]

    @staticmethod
    def _refuse_scripts(path: str) -> None:
        local = Path(path).expanduser()
        script = local if local.suffix == ".py" else local / f"{local.name}.py"
        if script.suffix == ".py" and (script.is_file() or local.suffix == ".py"):
            raise ConfigError(f"{path!r} is a dataset script ({script.name}); fedcore never runs code from a dataset: "
                              f"give the data files (path = \"parquet\", data_files = ...) or a folder of them")

    def _prepare(self, path: str, **options: Any) -> Any:
        datasets = _datasets()
        kwargs = {k: v for k, v in options.items() if v is not None}
        if "subset" in kwargs:
            kwargs["name"] = kwargs.pop("subset")
        builder = self._guard(lambda: datasets.load_dataset_builder(path, **kwargs), options.get("cache_dir"))
        module = type(builder).__module__
        if not module.startswith("datasets.packaged_modules.") or builder.name not in SAFE_BUILDERS:
            raise ConfigError(f"{self.where} resolves to the {builder.name!r} builder ({module}); fedcore reads only "
                              f"the builders that run no code from the data: {', '.join(SAFE_BUILDERS)}")
        self._guard(builder.download_and_prepare, options.get("cache_dir"))
        return builder

    def _guard(self, step: Any, cache_dir: str | None) -> Any:
        """Run one ``datasets`` step; its failures become one line naming what was looked for and where."""
        datasets = _datasets()
        try:
            return step()
        except ConfigError:
            raise
        except ConnectionError as exc:
            raise ConfigError(self._unreachable(datasets, cache_dir, exc)) from None
        except datasets.exceptions.DatasetNotFoundError as exc:
            raise ConfigError(f"{self.where}: not a local folder or file, and not found on the Hugging Face Hub "
                              f"({_first_line(exc)})") from None
        except FileNotFoundError as exc:
            raise ConfigError(f"{self.where}: no data found ({_first_line(exc)})") from None
        except RuntimeError as exc:
            if "script" in str(exc).lower():
                raise ConfigError(f"{self.where} is a dataset script; fedcore never runs code from a dataset "
                                  f"({_first_line(exc)})") from None
            raise ConfigError(f"{self.where}: {type(exc).__name__}: {_first_line(exc)}") from None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{self.where}: {type(exc).__name__}: {_first_line(exc)}") from None

    def _unreachable(self, datasets: Any, cache_dir: str | None, exc: Exception) -> str:
        import huggingface_hub.constants as hub

        cache = cache_dir or datasets.config.HF_DATASETS_CACHE
        offline = datasets.config.HF_HUB_OFFLINE
        why = "offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if offline \
            else f"the Hugging Face Hub cannot be reached ({_first_line(exc)})"
        return (f"{self.where} is not a local folder or file, nor in the Hugging Face caches ({cache}, "
                f"{hub.HF_HUB_CACHE}), and {why}; load it once where the hub is reachable, or give a local path")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _image_source(value: Any) -> Any:
    """What PIL opens for one stored image cell: its bytes, else its path."""
    if isinstance(value, Mapping):
        data, path = value.get("bytes"), value.get("path")
        value = io.BytesIO(data) if data else path
    if value is None:
        raise ConfigError("an image cell is empty")
    return value


def _open_image(value: Any) -> Any:
    from PIL import Image

    try:
        return Image.open(_image_source(value), formats=IMAGE_FORMATS)
    except (OSError, ValueError) as exc:  # PIL's UnidentifiedImageError is an OSError
        raise ConfigError(f"cannot decode an image ({_first_line(exc)}); readable formats: "
                          f"{', '.join(IMAGE_FORMATS)}") from None


def decode_image(value: Any, mode: str) -> np.ndarray:
    """One stored image (``{"bytes", "path"}`` or a path) as a uint8 array, by PIL limited to IMAGE_FORMATS."""
    with _open_image(value) as im:
        try:
            return np.asarray(im.convert(mode))
        except (OSError, ValueError) as exc:  # a truncated file fails when its pixels are read
            raise ConfigError(f"cannot decode an image ({_first_line(exc)})") from None


def image_mode(value: Any) -> str:
    """The PIL mode of one stored image, read from its header only."""
    with _open_image(value) as im:
        return str(im.mode)


class EncodedImages(ArrowImages):
    """:class:`ArrowImages` whose cells are still encoded (``Image(decode=False)``); decoded by
    :func:`decode_image` in the dataset's colour mode."""

    def __init__(self, table: Any, column: str, mode: str) -> None:
        super().__init__(table, column)
        self.mode = mode

    def take(self, indices: Any) -> list[torch.Tensor]:
        rows = self.table[[int(i) for i in indices]][self.column]
        return [image_tensor(decode_image(v, self.mode)) for v in rows]

    def select(self, indices: Any) -> EncodedImages:
        return EncodedImages(self.table.select([int(i) for i in indices]), self.column, self.mode)


def _is_encoded_image(feature: Any, datasets: Any) -> bool:
    if isinstance(feature, datasets.Image):
        return True
    if isinstance(feature, dict) and "bytes" in feature:  # a parquet image written without HF metadata
        return True
    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")  # file paths


def read_images(ds: Any, column: str, *, grayscale: bool, chunk: int = 512) -> torch.Tensor | ArrowImages:
    """The images of ``column``: one uint8 tensor when they share a size, else left encoded in the table.
    Numeric arrays (``Array3D``, lists of numbers) come as a tensor of their dtype; a 1-d array per row is a
    feature vector."""
    datasets = _datasets()
    feature = ds.features[column]
    if not _is_encoded_image(feature, datasets):
        return _numeric_inputs(ds, column, feature)
    table = ds.select_columns([column]).cast_column(column, datasets.Image(decode=False))
    if len(table) == 0:
        raise ConfigError(f"column {column!r} holds no rows")
    first = table[0][column]
    mode = "L" if grayscale or image_mode(first) in SINGLE_CHANNEL else "RGB"
    out: np.ndarray | None = None
    pos = 0
    for batch in table.iter(batch_size=chunk):
        for value in batch[column]:
            array = decode_image(value, mode)
            image = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
            if out is None:
                out = np.empty((len(table), *image.shape), dtype=np.uint8)
            if image.shape != out.shape[1:]:
                return EncodedImages(table, column, mode)  # sizes differ: decode per batch instead
            out[pos] = image
            pos += 1
    assert out is not None
    return torch.from_numpy(out)


def _numeric_inputs(ds: Any, column: str, feature: Any) -> torch.Tensor:
    try:
        array = np.asarray(ds.with_format("numpy")[column])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"column {column!r} ({feature}) is not images nor equal-length arrays of numbers "
                          f"({_first_line(exc)})") from None
    if array.dtype.kind not in "uifb" or array.ndim < 2:
        raise ConfigError(f"column {column!r} holds {feature}; the hf dataset reads images, or arrays of numbers "
                          f"(one per row, all the same shape); text is not supported")
    if array.ndim == 3:  # (n, h, w): one channel
        array = array[:, None]
    elif array.ndim == 4 and array.shape[-1] in (1, 3, 4) and array.shape[1] not in (1, 3):
        array = array.transpose(0, 3, 1, 2)  # HWC -> CHW
    if array.dtype.kind == "f" or array.dtype == np.uint8:
        return torch.from_numpy(np.ascontiguousarray(array))
    return torch.from_numpy(np.ascontiguousarray(array.astype(np.float32)))


def encode_labels(train: Any, test: Any | None, column: str) -> tuple[np.ndarray, np.ndarray | None, list[str]]:
    """Integer labels of both splits and the class names: a ``ClassLabel``'s names, the integers' range, or
    the sorted distinct strings of both splits."""
    datasets = _datasets()
    feature = train.features[column]
    splits = [np.asarray(train.with_format("numpy")[column])]
    if test is not None:
        splits.append(np.asarray(test.with_format("numpy")[column]))
    if isinstance(feature, datasets.ClassLabel):
        coded, names = [v.astype(np.int64) for v in splits], list(feature.names)
    elif {v.dtype.kind for v in splits} <= {"i", "u"}:
        present = [v for v in splits if len(v)]
        if any(int(v.min()) < 0 for v in present):
            raise ConfigError(f"label column {column!r} has negative values; labels are class indices 0..k-1")
        coded = [v.astype(np.int64) for v in splits]
        names = [str(i) for i in range(max((int(v.max()) for v in present), default=-1) + 1)]
    elif {v.dtype.kind for v in splits} <= {"U", "O", "S"}:
        names = sorted({str(v) for arr in splits for v in arr})
        code = {name: i for i, name in enumerate(names)}
        coded = [np.asarray([code[str(v)] for v in arr], dtype=np.int64) for arr in splits]
    else:
        raise ConfigError(f"label column {column!r} holds {feature}; labels are class names, integers or a "
                          f"ClassLabel")
    return coded[0], coded[1] if test is not None else None, names


def scalar_columns(ds: Any, skip: str) -> dict[str, np.ndarray]:
    """Every column of single numbers or strings (writer/user ids, labels) but ``skip``, as arrays."""
    datasets = _datasets()
    keep = [name for name, f in ds.features.items() if name != skip and (
        isinstance(f, datasets.ClassLabel) or (isinstance(f, datasets.Value) and "binary" not in f.dtype))]
    if not keep:
        return {}
    table = ds.select_columns(keep).with_format("numpy")
    return {name: np.asarray(table[name]) for name in keep}


def load_hf(*, path: str, subset: str | None = None, data_dir: str | None = None,
            data_files: str | list[str] | Mapping[str, Any] | None = None, revision: str | None = None,
            cache_dir: str | None = None, split: str = "train", test_split: str = "test", image: str = "image",
            label: str = "label", grayscale: bool = False, settings: TransformSettings | None = None
            ) -> tuple[ImageDataset | ArrayDataset, ImageDataset | ArrayDataset | None]:
    """(train, test) of a Hugging Face dataset; ``test_split = ""`` for none. Errors are one ConfigError line."""
    settings = settings or TransformSettings()
    source = HFSource(path=path, subset=subset, data_dir=data_dir, data_files=data_files, revision=revision,
                      cache_dir=cache_dir)
    train_ds = source.split(split)
    test_ds = source.split(test_split) if test_split else None
    for name, ds in (("train", train_ds), ("test", test_ds)):
        if ds is None:
            continue
        missing = [c for c in (image, label) if c not in ds.column_names]
        if missing:
            raise ConfigError(f"column {missing[0]!r} not in {path} ({name} split); columns: "
                              f"{', '.join(ds.column_names)}")
    y_train, y_test, classes = encode_labels(train_ds, test_ds, label)
    made = [_dataset(ds, y, classes, image=image, grayscale=grayscale, settings=settings)
            if ds is not None and y is not None else None
            for ds, y in ((train_ds, y_train), (test_ds, y_test))]
    assert made[0] is not None
    return made[0], made[1]


def _dataset(ds: Any, y: np.ndarray, classes: list[str], *, image: str, grayscale: bool,
             settings: TransformSettings) -> ImageDataset | ArrayDataset:
    inputs = read_images(ds, image, grayscale=grayscale)
    columns = scalar_columns(ds, skip=image)
    labels = torch.from_numpy(y)
    if isinstance(inputs, torch.Tensor) and inputs.ndim == 2:  # feature vectors: no image transform
        if settings.mode != "auto" or settings.size or settings.mean is not None:
            raise ConfigError(f"column {image!r} holds vectors; size, mean, std and transform apply to images")
        return ArrayDataset(inputs.float(), labels, classes, columns=columns)
    return ImageDataset(inputs, labels, classes, columns=columns, settings=settings)


__all__ = ["HFSource", "IMAGE_FORMATS", "SAFE_BUILDERS", "decode_image", "encode_labels", "load_hf", "read_images"]
