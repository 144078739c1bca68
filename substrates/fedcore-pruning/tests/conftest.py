"""Micro shapes shared by the substrate tests (width 32, depth 3-4, 8x8 inputs)."""
import pytest
import torch

from fedcore_pruning import PrunableViT, ViTShape


@pytest.fixture
def shape() -> ViTShape:
    return ViTShape(img_size=8, patch_size=2, in_chans=3, num_classes=10, embed_dim=32, depth=4, num_heads=4,
                    mlp_hidden=64)


@pytest.fixture
def full(shape: ViTShape) -> PrunableViT:
    torch.manual_seed(0)
    model = PrunableViT(shape)
    with torch.no_grad():  # non-trivial norms and biases, so slicing mistakes show up in the outputs
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture
def images(shape: ViTShape) -> torch.Tensor:
    return torch.randn(3, shape.in_chans, shape.img_size, shape.img_size, generator=torch.Generator().manual_seed(1))


@pytest.fixture(autouse=True)
def one_thread():
    """Micro models run faster on one thread; two contend on the shared two-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
