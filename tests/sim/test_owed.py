"""PendingSizes.fill: how much of what is left of a guarantee waiting work could take."""

import pytest

from gpupool.sim.owed import PendingSizes


@pytest.mark.parametrize(
    ("sizes", "room", "filled"),
    [
        ([], 4000, 0),
        ([8000], 6000, 0),  # too big for the guarantee: no claim
        ([8000, 4000, 4000], 6000, 4000),  # one 4 fits, the second does not
        ([4000, 1000, 1000, 1000], 6000, 6000),
        ([1000, 1000], 6000, 2000),  # less waiting than room
        ([500, 500, 500], 1000, 1000),  # fractions
    ],
)
def test_fill_takes_the_largest_sizes_that_fit(sizes, room, filled):
    p = PendingSizes()
    for s in sizes:
        p.add(s)
    assert p.fill(room) == filled


def test_removed_sizes_no_longer_count():
    p = PendingSizes()
    p.add(2000)
    p.add(2000)
    p.remove(2000)
    assert p.fill(4000) == 2000
    p.remove(2000)
    assert p.fill(4000) == 0
