"""run_rollout's on_turn callback: each turn is handed over as soon as its commands ran (a live
transcript), and an exception from the callback stops the rollout without grading and without
leaving its sandbox behind (how a cancelled batch stops its attempts)."""
import pytest

from tests.lib.test_rollout import (  # noqa: F401  (fixtures)
    ScriptedLLM,
    _own_sandboxes,
    _remove_leftovers,
    image_tag,
    rollout,
    task_dir,
    turn,
)

pytestmark = pytest.mark.docker


class Stop(Exception):
    pass


def test_each_turn_is_handed_over_after_its_commands_ran(client, image_tag, task_dir):
    seen = []
    llm = ScriptedLLM([turn("cat /app/data.csv"), "not json", turn("echo 10 > /app/out.txt", complete=True),
                       turn(complete=True)])
    traj = rollout(client, image_tag, task_dir, llm, on_turn=lambda t: seen.append(
        (t.index, t.state, len(t.commands), bool(t.parse_error), len(llm.calls))))
    assert traj.stop_reason == "completed" and traj.passed
    # handed over before the next model call, the unreadable reply included
    assert seen == [(1, "observation", 1, False, 1), (2, "none", 0, True, 2), (3, "action", 1, False, 3),
                    (4, "none", 0, False, 4)]


def test_an_exception_from_the_callback_stops_the_rollout_and_removes_the_sandbox(client, image_tag, task_dir):
    llm = ScriptedLLM([], then=turn("ls /app"))

    def on_turn(t):
        if t.index == 2:
            raise Stop()

    with pytest.raises(Stop):
        rollout(client, image_tag, task_dir, llm, on_turn=on_turn)
    assert len(llm.calls) == 2
    assert _own_sandboxes(client) == []
