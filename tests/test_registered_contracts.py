"""Every registered component, from every installed plugin, passes the contract checks (timm's idea).

Each class is checked as it declares in ``__fedcore_checks__`` (presets, fixture, expected failures);
see docs/plugins.md §5.
"""
from fedcore.testing import parametrize_registered


@parametrize_registered()
def test_registered_component_contract(component, check):
    check(component)
