"""The day range of the usage and chargeback reports (gpupool.client.calls, no server): the
days given, as YYYY-MM-DD, and a clear InvalidInput naming the argument for anything else."""

from __future__ import annotations

from datetime import date

import pytest

from gpupool.client import InvalidInput, calls


def test_usage_and_chargeback_send_the_days_given():
    u = calls.usage("day", date(2026, 5, 1), "2026-05-31", None, "ann")
    assert u.params == {"group_by": "day", "from": "2026-05-01", "to": "2026-05-31", "user": "ann"}
    c = calls.chargeback("model", None, date(2026, 6, 30), "lab")
    assert c.params == {"by": "model", "to": "2026-06-30", "tenant": "lab"}
    assert calls.chargeback("tenant", None, None, None).params == {"by": "tenant"}


@pytest.mark.parametrize("call", [calls.usage, calls.chargeback])
def test_a_bad_day_names_its_argument(call):
    by = "tenant"
    extra = (None,) if call is calls.usage else ()
    with pytest.raises(InvalidInput, match=r"^from_='May 1'.*YYYY-MM-DD"):
        call(by, "May 1", None, None, *extra)
    with pytest.raises(InvalidInput, match=r"^to='tomorrow'"):
        call(by, None, "tomorrow", None, *extra)
