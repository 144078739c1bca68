"""Entry point ``heterofl`` (group ``fedcore``): registers the ``heterofl`` recipe. Its components
(``submodel-share``, ``submodel-train``, ``masked-delta``) are the fedcore-pruning substrate's."""
import fedcore
from fedcore_heterofl.recipe import HETEROFL


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add_recipe("heterofl", HETEROFL)
