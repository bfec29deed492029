"""Server settings from the environment: the scheduler's reclaim delay, minimum run time and
service levels (docs/api.md, "Server settings")."""

import pytest

from gpupool.scheduler import SchedulerConfig
from gpupool.server.settings import Settings


def test_scheduler_settings_come_from_the_environment():
    s = Settings.from_env(
        {
            "GPUPOOL_RECLAIM_AFTER_S": "120",
            "GPUPOOL_MIN_RUNTIME_S": "60",
            "GPUPOOL_SERVICE_LEVELS_S": "36000, 3600",
            "GPUPOOL_DEFRAG_MOVES": "off",
            "GPUPOOL_PREEMPT_LEVELS_APART": "1",
            "GPUPOOL_RECLAIM_CHECKPOINTING_AT_ONCE": "off",
            "GPUPOOL_GANG_HOLD_BACKFILL": "off",
            "GPUPOOL_GANG_CLEARS_NODES": "on",
            "GPUPOOL_SERVICE_LEVELS_SIBLINGS_S": "0",
            "GPUPOOL_SERVICE_LEVELS_FINE_ORDER": "off",
            "GPUPOOL_RECLAIM_CHECKPOINTING_BY_SERVICE": "off",
        }
    )
    assert s.scheduler.gang_clears_nodes is True
    assert s.scheduler.service_levels_siblings_s == 0.0
    assert s.scheduler.service_levels_fine_order is False
    assert s.scheduler.reclaim_checkpointing_by_service is False
    assert s.scheduler.gang_hold_backfill is False
    assert s.scheduler.defrag_moves is False
    assert s.scheduler.preempt_levels_apart == 1
    assert s.scheduler.reclaim_checkpointing_at_once is False
    assert s.scheduler.reclaim_after_s == 120.0
    assert s.scheduler.min_runtime_s == 60.0
    assert s.scheduler.service_levels_s == (3600.0, 36000.0)
    # everything else keeps its default
    assert s.scheduler.policy == SchedulerConfig().policy


@pytest.mark.parametrize("off", ["off", "", "none"])
def test_service_levels_can_be_turned_off(off):
    assert Settings.from_env({"GPUPOOL_SERVICE_LEVELS_S": off}).scheduler.service_levels_s == ()


def test_relative_service_levels_come_from_the_environment():
    s = Settings.from_env(
        {
            "GPUPOOL_SERVICE_LEVELS_RELATIVE": "10, 0.1,1",
            "GPUPOOL_SERVICE_LEVELS_QUANTILE": "0.95",
            "GPUPOOL_SERVICE_LEVELS_HYSTERESIS": "2",
            "GPUPOOL_SERVICE_LEVELS_WINDOW": "2000",
        }
    ).scheduler
    assert s.service_levels_relative == (0.1, 1.0, 10.0)
    assert s.service_levels_quantile == 0.95
    assert s.service_levels_hysteresis == 2.0
    assert s.service_levels_window == 2000
    # the defaults: 0.2 / 2 / 20 x the p80 run length of the last 5,000 runs, 1.5x hysteresis
    d = Settings.from_env({}).scheduler
    assert d.service_levels_relative == (0.2, 2.0, 20.0)
    assert (d.service_levels_quantile, d.service_levels_hysteresis) == (0.8, 1.5)
    assert d.service_levels_window == 5000


@pytest.mark.parametrize("off", ["off", "", "none"])
def test_relative_service_levels_can_be_turned_off(off):
    s = Settings.from_env({"GPUPOOL_SERVICE_LEVELS_RELATIVE": off}).scheduler
    assert s.service_levels_relative == ()
    assert s.service_levels_s == SchedulerConfig().service_levels_s  # the absolute ones stay


def test_without_variables_the_scheduler_defaults_hold():
    assert Settings.from_env({}).scheduler == SchedulerConfig()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("GPUPOOL_RECLAIM_AFTER_S", "soon", "is not a number of seconds"),
        ("GPUPOOL_MIN_RUNTIME_S", "-5", "must be 0 or more"),
        ("GPUPOOL_SERVICE_LEVELS_S", "1h,10h", "e.g. 1800,18000,180000"),
        ("GPUPOOL_SERVICE_LEVELS_S", "0,3600", "must be above 0"),
        ("GPUPOOL_SERVICE_LEVELS_RELATIVE", "p80", "e.g. 0.2,2,20"),
        ("GPUPOOL_SERVICE_LEVELS_RELATIVE", "0,2,20", "must be above 0"),
        ("GPUPOOL_SERVICE_LEVELS_RELATIVE", "0.2,-2", "must be above 0"),
        ("GPUPOOL_SERVICE_LEVELS_QUANTILE", "80%", "above 0 and at most 1"),
        ("GPUPOOL_SERVICE_LEVELS_QUANTILE", "80", "above 0 and at most 1"),
        ("GPUPOOL_SERVICE_LEVELS_QUANTILE", "0", "above 0 and at most 1"),
        ("GPUPOOL_SERVICE_LEVELS_QUANTILE", "nan", "above 0 and at most 1"),
        ("GPUPOOL_SERVICE_LEVELS_HYSTERESIS", "0.5", "a factor of 1 or more"),
        ("GPUPOOL_SERVICE_LEVELS_HYSTERESIS", "large", "a factor of 1 or more"),
        ("GPUPOOL_SERVICE_LEVELS_WINDOW", "0", "a whole number of recently started"),
        ("GPUPOOL_SERVICE_LEVELS_WINDOW", "5e3", "a whole number of recently started"),
        ("GPUPOOL_DEFRAG_MOVES", "maybe", "give on or off"),
        ("GPUPOOL_RECLAIM_CHECKPOINTING_AT_ONCE", "soon", "give on or off"),
        ("GPUPOOL_GANG_HOLD_BACKFILL", "sometimes", "give on or off"),
        ("GPUPOOL_GANG_CLEARS_NODES", "often", "give on or off"),
        ("GPUPOOL_SERVICE_LEVELS_FINE_ORDER", "fine", "give on or off"),
        ("GPUPOOL_RECLAIM_CHECKPOINTING_BY_SERVICE", "most", "give on or off"),
        ("GPUPOOL_SERVICE_LEVELS_SIBLINGS_S", "10 min", "is not a number of seconds"),
        ("GPUPOOL_SERVICE_LEVELS_SIBLINGS_S", "-1", "must be 0 or more"),
        ("GPUPOOL_COOKIE_SECURE", "yes please", "give on or off"),
        ("GPUPOOL_MIG_RELAYOUT", "enabled", "give on or off"),
        ("GPUPOOL_PREEMPT_LEVELS_APART", "0", "a whole number of levels, 1 or more"),
        ("GPUPOOL_PREEMPT_LEVELS_APART", "two", "a whole number of levels, 1 or more"),
    ],
)
def test_bad_values_say_what_to_give(name, value, says):
    with pytest.raises(ValueError, match=says):
        Settings.from_env({name: value})


@pytest.mark.parametrize(
    ("value", "on"), [("on", True), ("1", True), ("Yes", True), ("off", False)]
)
def test_switches_read_on_as_on(value, on):
    # "on" used to read as off for the cookie's Secure flag, silently
    s = Settings.from_env({"GPUPOOL_COOKIE_SECURE": value, "GPUPOOL_MIG_RELAYOUT": value})
    assert s.cookie_secure is on and s.mig_relayout is on


def test_the_launch_grace_comes_from_the_environment():
    assert Settings().launch_grace_s == 60.0
    assert Settings.from_env({"GPUPOOL_LAUNCH_GRACE_S": "5"}).launch_grace_s == 5.0
    with pytest.raises(ValueError, match="GPUPOOL_LAUNCH_GRACE_S"):
        Settings.from_env({"GPUPOOL_LAUNCH_GRACE_S": "soon"})
