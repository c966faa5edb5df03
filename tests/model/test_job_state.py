"""The one declaration of a job's lifecycle holds together."""

from __future__ import annotations

from gpuaas.model.job_state import ACTIVE, FINAL, TRANSITIONS, UNFINISHED, JobState
from gpuaas.store.tables import Job, JobEvent


def test_every_state_is_reachable_from_submission() -> None:
    seen: set[JobState] = set()
    frontier = set(TRANSITIONS[None])
    while frontier:
        state = frontier.pop()
        seen.add(state)
        frontier |= TRANSITIONS.get(state, frozenset()) - seen
    assert seen == set(JobState)


def test_final_states_are_never_left_and_every_other_state_moves_on() -> None:
    for state in JobState:
        assert (state in FINAL) == (not TRANSITIONS.get(state))


def test_groups_partition_the_states() -> None:
    assert set(UNFINISHED) == {JobState.PENDING, *ACTIVE}
    assert set(UNFINISHED) | set(FINAL) | {JobState.PREEMPTED} == set(JobState)
    assert not set(UNFINISHED) & set(FINAL)


def test_states_compare_as_the_stored_text_and_fit_the_columns() -> None:
    assert JobState.PENDING == "Pending" and "Running" in ACTIVE
    for column in (Job.__table__.c.state, JobEvent.__table__.c.to_state):
        assert all(len(state) <= column.type.length for state in JobState)
