"""Every registered component, from every installed plugin, passes the contract checks (timm's idea).

Each class is checked as it declares in ``__fedcore_checks__`` (presets, fixture, expected failures);
see docs/plugins.md §5. ``KNOWN`` lists failures the checks find in components owned elsewhere, with the
reason; each is a strict xfail, so a fix shows up as XPASS and its line must go. It is empty: the resume check
found that split learning could not resume (its server state was created lazily), fixed in fedcore-split.
"""
from fedcore.testing import parametrize_registered

SPLIT_RESUME = ("the split server state (fedcore_split.state.SplitServerState, a state_dict object in the server "
                "stash) is created lazily, not in fedcore_run_start, so a resumed run has no live object to load "
                "its saved state into (CheckpointError)")
KNOWN: dict[str, dict[str, str]] = {}


@parametrize_registered(known_failures=KNOWN)
def test_registered_component_contract(component, check):
    check(component)
