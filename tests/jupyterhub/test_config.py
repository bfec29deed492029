"""The generated hub config: loadable by JupyterHub's config loader, with the settings the
queueing flow depends on, and no secrets in the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets.config import PyFileConfigLoader

from gpupool.server.hub.config import (
    HubSettings,
    HubSetupError,
    crypt_key,
    find_proxy,
    hub_command,
    hub_env,
    service_secret,
    write_hub_config,
)


@pytest.fixture
def hub(tmp_path) -> HubSettings:
    return HubSettings(
        data_dir=tmp_path / "hub",
        api_url="http://127.0.0.1:8080",
        proxy_command="/opt/chp/bin/configurable-http-proxy",
    )


def _load(path, env: dict[str, str], monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    loader = PyFileConfigLoader(path.name, path=str(path.parent))
    return loader.load_config()


def test_config_loads_and_sets_what_queueing_needs(hub, monkeypatch):
    path = write_hub_config(hub)
    env = hub_env(hub, "gp_secret_token", base={})
    c = _load(path, env, monkeypatch)
    assert c.JupyterHub.port == 8000 and c.JupyterHub.ip == "127.0.0.1"
    assert c.Spawner.start_timeout == 86400  # a queued spawn is not cut short
    assert c.JupyterHub.concurrent_spawn_limit == 0
    assert c.JupyterHub.cleanup_servers is False  # hub restarts keep notebooks
    assert c.JupyterHub.spawner_class.endswith("GpupoolSpawner")
    assert c.GpupoolSpawner.gpupool_token == "gp_secret_token"
    # a plain API client: no hand-off directory, no accounts, no homes of its own
    assert not {"launch_dir", "jobs_account", "home_dir_template"} & set(c.GpupoolSpawner)
    assert c.Authenticator.enable_auth_state is True
    (svc,) = c.JupyterHub.services
    assert svc["name"] == "gpupool" and svc["url"] == "http://127.0.0.1:8080"
    assert svc["api_token"] == service_secret(hub) and svc["oauth_no_confirm"] is True
    user_role = c.JupyterHub.load_roles[0]
    assert "access:services!service=gpupool" in user_role["scopes"]
    # gpupool's spawn-pending page (one live message) comes before the hub's own templates
    (templates,) = c.JupyterHub.template_paths
    assert (Path(templates) / "spawn_pending.html").is_file()
    # secrets travel in the environment, never in the file
    text = path.read_text()
    assert "gp_secret_token" not in text and service_secret(hub) not in text
    assert crypt_key(hub) not in text


def test_secrets_are_made_once_and_private(hub):
    a, b = crypt_key(hub), crypt_key(hub)
    assert a == b and len(a) == 64
    assert (hub.data_dir / "crypt_key").stat().st_mode & 0o777 == 0o600
    assert service_secret(hub) != a


def test_command_and_missing_proxy(hub, monkeypatch):
    cmd = hub_command(hub)
    assert cmd[1:4] == ["-m", "jupyterhub", "-f"] and cmd[4].endswith("jupyterhub_config.py")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(HubSetupError, match="npm install -g configurable-http-proxy"):
        find_proxy()


def test_every_engine_gets_the_one_spawner_and_the_engine_s_notebook_command(
    hub, monkeypatch, tmp_path
):
    from dataclasses import replace

    from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
    from gpupool.system import SystemSettings, _hub_settings

    engine = SlurmEngine(SlurmOptions(notebook_command="/shared/venv/bin/jupyterhub-singleuser -y"))
    slurm = replace(hub, singleuser_command=tuple(engine.notebook_command or ()))
    cfg = _load(write_hub_config(slurm), hub_env(slurm, "gp_x", base={}), monkeypatch)
    assert cfg.JupyterHub.spawner_class == "gpupool.jupyterhub.spawner.GpupoolSpawner"
    assert cfg.GpupoolSpawner.cmd == ["/shared/venv/bin/jupyterhub-singleuser", "-y"]
    plain = _hub_settings(SystemSettings(data_dir=tmp_path / "data"))
    assert plain.spawner_class == "gpupool.jupyterhub.spawner.GpupoolSpawner"


def test_configs_that_name_the_remote_spawner_keep_working():
    from gpupool.jupyterhub.remote import RemoteNotebookSpawner
    from gpupool.jupyterhub.spawner import GpupoolSpawner

    assert issubclass(RemoteNotebookSpawner, GpupoolSpawner)
    assert RemoteNotebookSpawner.start is GpupoolSpawner.start
