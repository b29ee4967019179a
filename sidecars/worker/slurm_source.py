"""The agent's node straight from Slurm: its look, and the drain and undrain it writes itself."""

from __future__ import annotations

from sidecars.slurm import Job, SlurmClient, SlurmError, SlurmUnreachable
from sidecars.slurm.nodejson import NodeRecord
from sidecars.worker.observation import Observation


class SlurmSource:
    """The node straight from Slurm. After a failed look it pings first (fast) before asking again
    (a down controller makes `scontrol show node` retry for ~9 s)."""

    def __init__(self, client: SlurmClient, name: str) -> None:
        self.client = client
        self.name = name
        self._controller_down = False

    async def observe(self) -> Observation:
        if self._controller_down:
            try:
                ping = await self.client.ping()
            except SlurmError as exc:  # even `scontrol ping` can time out
                return Observation("slurm", error=str(exc), controller_down=True)
            if not ping.up:
                return Observation(
                    "slurm", error="controller unreachable (scontrol ping)", controller_down=True
                )
        try:
            node = await self.client.node(self.name)
        except SlurmUnreachable as exc:
            self._controller_down = True
            return Observation("slurm", error=str(exc), controller_down=True)
        except SlurmError as exc:
            return Observation("slurm", error=str(exc))
        self._controller_down = False
        if node is None:
            return Observation("slurm", view=None)
        reason = node.reason.text if node.reason else None
        return Observation("slurm", view=NodeRecord(name=node.name, state=node.state, reason=reason))

    async def jobs_here(self) -> list[Job]:
        return [j for j in await self.client.jobs() if self.name in j.nodes]

    async def drain(self, reason: str) -> bool:
        """Set DRAIN with our reason, unless the node is drained already: a write with a reason
        replaces the one there, so it rests on a look taken just before it, never on an older one
        (Slurm has no conditional update; what is left is the few milliseconds between the two)."""
        now = await self._fresh()
        if now.view is None or now.view.state.drain:
            return False
        await self.client.drain([self.name], reason)
        return True

    async def undrain(self, reason: str) -> bool:
        """Clear a drain (or a time-out's DOWN) only while its reason is still exactly `reason`,
        looked at now: the control plane's rule, so both paths behave alike."""
        now = await self._fresh()
        if now.view is None or now.view.reason != reason:
            return False
        state = now.view.state
        # RESUME also clears a DOWN we set on a drain time-out; UNDRAIN alone keeps DOWN
        if state.base == "DOWN":
            await self.client.resume([self.name])
        elif state.drain:
            await self.client.undrain([self.name])
        else:
            return False
        return True

    async def set_down(self, reason: str) -> None:
        """DOWN at once, straight to Slurm (a drain's deadline: Slurm requeues the batch jobs)."""
        await self.client.down([self.name], reason)

    async def delete_record(self) -> None:
        """Delete a dynamic node's record once it is drained (`scontrol delete nodename`)."""
        await self.client.delete_node(self.name)

    async def _fresh(self) -> Observation:
        now = await self.observe()
        if not now.ok:
            raise SlurmError(("scontrol", "show", "node"), now.error or "lookup failed")
        return now
