"""Which boxes the lifetime scheduler pauses or deletes at a tick: a share of its steps per team,
so one team's boxes that stall their pauses hold back no other team's deadlines."""

from __future__ import annotations

from typing import Any

from hutch.services.lifetimes import LIFETIME_STEPS, LIFETIME_STEPS_PER_TEAM, next_steps


def _due(team: str, n: int, pause: bool = True) -> list[tuple[str, str, bool]]:
    return [(f"{team}-{i}", team, pause) for i in range(n)]


def test_one_team_with_many_boxes_due_takes_its_share_and_the_others_theirs() -> None:
    due = _due("hog", 64) + _due("a", 2) + _due("b", 1, pause=False)
    chosen = next_steps(due, {})
    teams = [team for _, team, _ in chosen]
    assert teams.count("hog") == LIFETIME_STEPS_PER_TEAM
    assert teams.count("a") == 2 and teams.count("b") == 1
    assert ("b-0", "b", False) in chosen  # a delete stays a delete


def test_a_teams_steps_under_way_count_against_its_share_and_no_box_runs_twice() -> None:
    running: dict[str, tuple[str, Any]] = {f"hog-{i}": ("hog", None) for i in range(LIFETIME_STEPS_PER_TEAM)}
    running["a-0"] = ("a", None)
    chosen = next_steps(_due("hog", 10) + _due("a", 3), running)
    assert [box for box, _, _ in chosen] == ["a-1", "a-2"]


def test_all_steps_together_are_bounded() -> None:
    due = [box for t in range(LIFETIME_STEPS) for box in _due(f"team{t}", 3)]
    assert len(next_steps(due, {})) == LIFETIME_STEPS
    full: dict[str, tuple[str, Any]] = {f"x-{i}": (f"x{i}", None) for i in range(LIFETIME_STEPS)}
    assert next_steps(_due("a", 1), full) == []
