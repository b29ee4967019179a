"""scripts/_steps.py, shared by the container scripts (compose_tour.py, kube_play.py): a wait gives
the first true answer or names what it waited for, and a failed command is named with its output."""

from __future__ import annotations

import sys
import time

import pytest

from tests.shipping.shipped import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from _steps import StepFailed, run, until


def test_until_returns_the_first_true_answer() -> None:
    answers = iter([None, 0, "", "ready", "later"])
    assert until("ready", lambda: next(answers), timeout=30, every=0.01) == "ready"
    assert next(answers) == "later"  # asked no more once it had an answer


def test_until_names_what_it_waited_for_when_time_runs_out() -> None:
    asked = []
    started = time.monotonic()
    with pytest.raises(StepFailed, match=r"^timed out after 0.2s waiting for the moon$"):
        until("the moon", lambda: asked.append(1), timeout=0.2, every=0.05)
    assert time.monotonic() - started >= 0.2 and len(asked) >= 2


def test_run_names_a_failed_command_with_the_end_of_its_output() -> None:
    with pytest.raises(StepFailed) as err:
        run("sh", "-c", "echo out; echo err >&2; exit 3")
    assert str(err.value) == "sh -c echo out; echo err >&2; exit 3: exit 3: out\nerr\n"
    r = run("sh", "-c", 'printf %s "$X"; pwd; exit 3', check=False, cwd=ROOT, env={"X": "seen"})
    assert (r.returncode, r.stdout) == (3, f"seen{ROOT}\n")
    assert run("printf", "%05d", "42").stdout == "00042"
