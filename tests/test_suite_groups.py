"""The suite's groups are in force: under pytest-xdist's --dist loadgroup a grouped test's id carries its group
(``@name``), which is how the scheduler keeps a group on one worker. pytest 9.2 stopped reading the id xdist
rewrites, and every group was lost without a word (docs/contributing.md, "The suite's time")."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("suite-groups")
def test_a_grouped_test_runs_as_its_group(request: pytest.FixtureRequest) -> None:
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not under pytest-xdist (-n 0): no groups to keep")
    assert request.config.getvalue("loadgroup"), "the suite runs with --dist loadgroup (pyproject.toml)"
    assert request.node.nodeid.endswith("@suite-groups"), request.node.nodeid
