"""Review 37 (the classifier): what it stopped reading never passes as safe."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.safety.classifier import classify
from tests.fakes.llm import FakeLLM
from tests.test_attack_review_classifier_only import CONFIG, asks_and_nothing_happens

# -- the classifier: what it stopped reading ---------------------------------------------------------------------
# `peel` took off at most 32 wrappers and judged the 33rd as if it were the command: `nice` × 33 `rm -rf ~`
# was "safe" — run unasked in classifier-only mode with chatgate's rights, and a hardline command run in the sandbox.
# printf's format was used again for 8 rounds only: an argument after them was not in the text a shell was fed.

@pytest.mark.parametrize("wrapper", ["nice ", "env ", "nohup ", "uv run ", "sudo "])
def test_a_long_line_of_wrappers_never_hides_the_command_they_run(wrapper: str):
    assert classify(wrapper * 3 + "rm -rf ~").verdict == "hardline"
    for count in (32, 33, 40, 200):
        assert classify(wrapper * count + "rm -rf ~").verdict != "safe", count


def test_printf_feeds_a_shell_every_argument_however_many():
    fed = "printf '%s\\n' " + "true " * 8 + "'rm -rf ~'"
    assert classify(fed + " | sh").verdict == "hardline"
    assert classify(f'bash -c "$({fed})"').verdict == "hardline"
    assert classify("printf '%s\\n' a b c d e f g h i j k").verdict == "safe"


async def test_classifier_only_mode_asks_for_a_deletion_behind_many_wrappers(tmp_path: Path, monkeypatch,
                                                                              llm: FakeLLM):

    user = tmp_path / "user"
    state = user / ".chatgate"
    (state / "workspace" / "D").mkdir(parents=True)
    (state / "config.yaml").write_text(CONFIG)
    monkeypatch.setenv("HOME", str(user))
    await asks_and_nothing_happens(state, llm, "nice " * 33 + "rm -rf D")
