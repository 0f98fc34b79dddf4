"""How the broker stores the consumer offsets its clients send (UPDATE_CONSUMER_OFFSET, a pull's
commitOffset): into the store, through the `faults.OffsetFaults` in force when they are on."""

from __future__ import annotations

import asyncio

from .faults import FaultInjector
from .ports import StoreSlot
from .settings import BrokerSettings


class ClientOffsetCommits:
    """Commits client offsets; a pull's commit may be held back (``OffsetFaults.pull_commit_delay``)."""

    def __init__(self, store_slot: StoreSlot, faults: FaultInjector, settings: BrokerSettings) -> None:
        self.store_slot = store_slot
        self.faults = faults
        self.settings = settings
        self._late: set[asyncio.Task[None]] = set()

    async def commit(self, group: str, topic: str, queue_id: int, offset: int, *, from_pull: bool) -> None:
        """Store an offset a client sent, through the offset faults when they are on."""
        faults = self.faults.offsets
        if from_pull and faults.pull_commit_delay > 0:
            task = asyncio.get_running_loop().create_task(
                self._commit_later(faults.pull_commit_delay, group, topic, queue_id, offset),
                name=f"{self.settings.name}-late-commit")
            self._late.add(task)
            task.add_done_callback(self._late.discard)
            return
        await self._commit(group, topic, queue_id, offset, faults.offset_race)

    def zero_for_uncommitted(self) -> bool:
        """Whether QUERY_CONSUMER_OFFSET answers 0 for a never-committed queue that starts at 0 (its first
        message in memory) rather than 22 (``OffsetFaults.first_on_disk``)."""
        return not self.faults.offsets.first_on_disk

    def late(self) -> list[asyncio.Task[None]]:
        """Pull commits not yet applied."""
        return list(self._late)

    async def _commit_later(self, delay: float, group: str, topic: str, queue_id: int, offset: int) -> None:
        await asyncio.sleep(delay)
        await self._commit(group, topic, queue_id, offset, self.faults.offsets.offset_race)

    async def _commit(self, group: str, topic: str, queue_id: int, offset: int, race: float) -> None:
        store = self.store_slot.current
        if store is None:
            return
        if race > 0 and not store.has_offsets(group, topic):
            # Java: map = offsetTable.get(key); if null: map = new ...; map.put(q, o); offsetTable.put(key, map)
            await asyncio.sleep(race)
            if self.store_slot.current is store:  # a broker stopped meanwhile never applied it
                store.replace_offsets(group, topic, {queue_id: offset})
            return
        store.commit_offset(group, topic, queue_id, offset)
