"""Pure parts of the spawner: which culling warning the user sees."""

from __future__ import annotations

from gpupool.jupyterhub.notices import notice_for, set_notice
from gpupool.jupyterhub.spawner import _latest_warning


def _ev(kind: str, at: float, message: str = "") -> dict:
    return {"kind": kind, "at": at, "message": message}


def test_latest_warning_shows_the_newest_recent_warning():
    w = {
        "events": [
            _ev("workload.admitted", 10),
            _ev("workload.cull_warning", 20, "idle for 50 min; stopped in 10 min"),
            _ev("workload.cull_warning", 30, "idle for 55 min; stopped in 5 min"),
        ]
    }
    assert _latest_warning(w, now=40, show_s=900) == "idle for 55 min; stopped in 5 min"
    # an old warning fades (the notebook was busy again: the culler sends nothing new)
    assert _latest_warning(w, now=30 + 901, show_s=900) is None


def test_a_state_change_after_the_warning_clears_it():
    w = {"events": [_ev("workload.cull_warning", 20, "idle"), _ev("workload.running", 25)]}
    assert _latest_warning(w, now=30, show_s=900) is None
    assert _latest_warning({"events": []}, now=30, show_s=900) is None


def test_notices_are_per_user_and_escaped():
    class U:
        name = "eve"

    set_notice("eve", "<script>x</script> stopped")
    assert "&lt;script&gt;" in notice_for(U()) and "<script>" not in notice_for(U())
    set_notice("eve", None)
    assert notice_for(U()) == "" and notice_for(None) == ""


def test_form_data_keeps_only_the_forms_fields():
    from gpupool.jupyterhub.spawner import _simple_form

    data = {"profile": ["gpu"], "tenant": ["lab"], "_xsrf": ["abc"], "other": ["x", "y"]}
    assert _simple_form(data) == {"profile": "gpu", "tenant": "lab"}


def test_the_spawner_knows_every_workload_state_by_the_domains_names():
    from gpupool.domain import WorkloadState as S
    from gpupool.jupyterhub.spawner import ACTIVE, ENDED, STOPPED_BECAUSE

    assert {S.PENDING} | set(ACTIVE) | set(ENDED) == set(S)
    assert not set(ACTIVE) & set(ENDED)
    assert set(STOPPED_BECAUSE) <= set(ENDED)


def test_the_spawner_is_a_plain_api_client_and_sends_the_hub_env_without_host_names():
    """It starts no process (not a LocalProcessSpawner) and shares no directory with
    gpupool; the hub's variables go with the submission, less gpupool's and the host's."""
    from jupyterhub.spawner import LocalProcessSpawner

    from gpupool.jupyterhub.spawner import GpupoolSpawner, remote_env

    assert not issubclass(GpupoolSpawner, LocalProcessSpawner)
    assert not {"launch_dir", "jobs_account", "home_dir_template"} & set(
        GpupoolSpawner.class_trait_names()
    )
    env = {
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_SERVICE_URL": "http://:0/user/eve/",
        "CUDA_VISIBLE_DEVICES": "GPU-x",
        "GPUPOOL_WORKLOAD_ID": "w",
        "HOME": "/root",
        "PATH": "/root/bin",
        "USER": "root",
    }
    assert remote_env(env) == {
        "JUPYTERHUB_API_TOKEN": "t",
        "JUPYTERHUB_SERVICE_URL": "http://:0/user/eve/",
    }
