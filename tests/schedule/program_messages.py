"""The pipeline messages a set of stage programs posts, for tests of how schedules route them."""
from __future__ import annotations

from collections.abc import Iterator

from narrowpath.schedule.sim.programs import Exchange, StageProgram


def posted_messages(programs: tuple[StageProgram, ...]) -> Iterator[tuple[int, tuple, bool]]:
    """(posting stage, message id, is a send) of every message in every exchange of the programs, in order."""
    for prog in programs:
        for it in prog.items:
            if isinstance(it, Exchange):
                for mid, is_send in it.messages:
                    yield prog.stage, mid, is_send
