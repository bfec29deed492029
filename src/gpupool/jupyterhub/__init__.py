"""JupyterHub integration (see docs/jupyterhub.md).

- `spawner.GpupoolSpawner`: notebooks get their GPUs from gpupool and wait in its queue;
- `authenticator.GpupoolAuthenticator`: log in with gpupool credentials, admins follow gpupool;
- `launch.HubLaunchExecutor`: the server side of the hand-off (gpupool admits, the hub starts);
- `config`: the hub `gpupool up` runs (generated config, command, start, readiness);
- `sso`: the dashboard as a hub service with single sign-on;
- `options`, `notices`, `client`: the form and validation, user banners, the API client.

Nothing is imported here, so `gpupool up` can use `config` without loading JupyterHub.
"""
