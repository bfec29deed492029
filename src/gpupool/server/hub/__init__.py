"""The gpupool server's side of JupyterHub: `config` writes the hub's config file and starts
it, `keeper` keeps the hub `gpupool up` runs alive, `beside` starts that hub beside the
server (its settings, its admin token). The code that runs inside the hub is
`gpupool.jupyterhub`; the dashboard's sign-on through the hub is `gpupool.web.hub_sso`."""
