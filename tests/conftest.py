"""Shared fixtures of the physics tests."""

import pytest


@pytest.fixture(scope="session")
def hand_path(tmp_path_factory):
    """The hand-made profile of test_physics_step, saved as a profile file (for Request(profile=...))."""
    from test_physics_step import hand_profile

    from perfmodel.profile import save_profile

    path = tmp_path_factory.mktemp("hand") / "hand.json"
    save_profile(hand_profile(), path)
    return str(path)
