"""The tour's voice and hands: a line said, a step that did not show what it should, the summary at
the end, and the `slurm-sidecars` command typed as an operator types it."""

from __future__ import annotations

from sidecars.cli import self_argv
from sidecars.demo.stack import DemoStack
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent


class StepFailed(RuntimeError):
    pass


def say(text: str = "") -> None:
    print(text, flush=True)


def summary(results: list[tuple[str, bool, str]]) -> bool:
    """Each step's (title, passed, note) said at the end of a tour (this one's and the compose
    stack's, scripts/compose_tour.py); whether every step passed."""
    say("\nSummary")
    for title, ok, note in results:
        say(f"  {'ok  ' if ok else 'FAIL'} {title}: {note}")
    return all(ok for _, ok, _ in results)


async def cli(stack: DemoStack, *args: str) -> str:
    """`slurm-sidecars ARGS --control-plane URL --token-file FILE`, as an operator types it."""
    done = await process.run(
        self_argv(*args, "--control-plane", stack.control_plane_url, "--token-file", str(stack.token_file)),
        timeout=30,
        env=stack.cluster.env,
        merge_stderr=True,
        preexec_fn=die_with_parent(),
    )
    if done.returncode != 0:
        raise StepFailed(f"slurm-sidecars {' '.join(args[:2])}: exit {done.returncode}: {done.text(500)}")
    return done.text()
