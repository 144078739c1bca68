"""Entry point ``fedrolex`` (group ``fedcore``): registers the ``fedrolex`` recipe. Its components
(``submodel-share``, ``submodel-train``, ``masked-delta``) are the fedcore-pruning substrate's."""
import fedcore
from fedcore_fedrolex.recipe import FEDROLEX


@fedcore.hookimpl
def fedcore_register_components(registry):
    registry.add_recipe("fedrolex", FEDROLEX)
