"""ShapeMix.add_counted: many workloads counted in at once equal the same `add`s one by one."""

import random

from gpupool.scheduler.mix import ShapeMix, class_key


def test_counted_in_at_once_equals_one_by_one() -> None:
    rng = random.Random(7)
    one, many = ShapeMix(), ShapeMix()
    sums: dict[tuple, list[int]] = {}
    for _ in range(300):
        n = rng.choice([1, 1, 2, 4, 8])
        milli = n * 1000 if rng.random() < 0.6 else rng.choice([100, 250, 500])
        takes = [(g, min(milli, 1000), 0) for g in range(n if milli >= 1000 else 1)]
        cpu, mem = rng.choice([0, 2000, 8000]), rng.choice([0, 4096, 65536])
        k = class_key(takes, cpu, mem, milli)
        one.add(k, milli, cpu, mem, 1)
        if k:
            s = sums.setdefault(k, [0, 0, 0, 0])
            for i, v in enumerate((1, milli, cpu, mem)):
                s[i] += v
    many.add_counted(sums)
    assert many._sums == one._sums and many._sums
    assert many.classes() == one.classes()
    # counted out one by one afterwards, as work ends
    for k, (n, milli, cpu, mem) in list(sums.items())[:5]:
        many.add(k, milli // n, cpu // n, mem // n, -1)
        one.add(k, milli // n, cpu // n, mem // n, -1)
    assert many._sums == one._sums
