/* Tenants & quotas page: the tenant tree with guaranteed / fair share / limit / allocated /
 * used, and (for admins and tenant-admins of the subtree) a validated quota editor. */
"use strict";
(() => {
  const { h } = GP;
  const REFRESH_MS = 10000;
  let tenants = [];
  let editing = null;

  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.tenants)) || []);
  const enc = (name) => name.split("/").map(encodeURIComponent).join("/");
  // Quotas come as milli (1000 = one GPU); the page shows and edits GPU counts.
  const q = (t) => t.quota || t;
  const milli = (t, k) => { const v = q(t)[`${k}_milli`]; return v === undefined ? null : v; };
  const gpuCell = (v) => h("td", { class: "num" }, v === null || v === undefined ? "—" : GP.gpus(v));

  function render() {
    const u = GP.me();
    GP.fillTable("tenants", tenants.map((t) => {
      const depth = (t.name.match(/\//g) || []).length;
      const may = GP.canAdminTenant(t.name, u);
      return h("tr", { class: `depth-${Math.min(depth, 3)}`, dataset: { tenant: t.name } },
        h("th", { scope: "row" }, t.name),
        gpuCell(milli(t, "guaranteed")), gpuCell(t.fair_share_milli ?? null),
        h("td", { class: "num" }, milli(t, "limit") === null ? "none" : GP.gpus(milli(t, "limit"))),
        h("td", { class: "num" }, q(t).weight ?? 1),
        h("td", { class: "num" }, milli(t, "max_per_user") === null ? "—" : GP.gpus(milli(t, "max_per_user"))),
        gpuCell(t.allocated_milli ?? 0), gpuCell(t.used_milli ?? t.busy_milli ?? null),
        h("td", {}, may ? h("button", { type: "button", class: "secondary", onclick: () => openEditor(t), "aria-label": `Edit quota of ${t.name}` }, "Edit") : null));
    }), "No tenants yet.");
  }

  async function refresh() {
    tenants = items(await GP.get("/tenants")).sort((a, b) => a.name.localeCompare(b.name));
    render();
    GP.stamp();
  }

  function setVal(id, v) { document.getElementById(id).value = v === null || v === undefined ? "" : String(v); }

  function openEditor(t) {
    editing = t.name;
    document.getElementById("quota-tenant").textContent = t.name;
    const g = (k) => { const v = milli(t, k); return v === null ? null : v / 1000; };
    setVal("q-guaranteed", g("guaranteed") ?? 0);
    setVal("q-limit", g("limit"));
    setVal("q-weight", q(t).weight ?? 1);
    setVal("q-max-per-user", g("max_per_user"));
    setVal("q-idle", t.idle_timeout_s ? t.idle_timeout_s / 60 : null);
    ["q-guaranteed", "q-limit", "q-weight", "q-max-per-user", "q-idle"].forEach((id) => GP.fieldError(id, ""));
    GP.formError("quota-error", "");
    const ed = document.getElementById("quota-editor");
    ed.hidden = false;
    document.getElementById("q-guaranteed").focus();
  }

  /** Client-side checks (the API checks again); returns the request body or null. */
  function readQuota() {
    const fields = {
      guaranteed: GP.numberField("q-guaranteed", { label: "Guaranteed GPUs" }),
      limit: GP.numberField("q-limit", { optional: true, label: "Limit GPUs" }),
      weight: GP.numberField("q-weight", { label: "Weight" }),
      max_per_user: GP.numberField("q-max-per-user", { optional: true, label: "Max GPUs per user" }),
      idle: GP.numberField("q-idle", { optional: true, label: "Idle timeout" }),
    };
    const ids = { guaranteed: "q-guaranteed", limit: "q-limit", weight: "q-weight", max_per_user: "q-max-per-user", idle: "q-idle" };
    let ok = true;
    for (const [k, r] of Object.entries(fields)) { GP.fieldError(ids[k], r.error || ""); if (r.error) ok = false; }
    if (!ok) return null;
    if (fields.weight.value <= 0) { GP.fieldError("q-weight", "Weight: must be above 0."); return null; }
    if (fields.max_per_user.value === 0) { GP.fieldError("q-max-per-user", "Max GPUs per user: must be above 0, or empty for no cap."); return null; }
    if (fields.limit.value !== null && fields.limit.value < fields.guaranteed.value) {
      GP.fieldError("q-limit", `Limit GPUs: ${fields.limit.value} is below the guarantee of ${fields.guaranteed.value}; raise the limit or lower the guarantee.`);
      return null;
    }
    return {
      guaranteed_gpus: fields.guaranteed.value,
      limit_gpus: fields.limit.value,
      weight: fields.weight.value,
      max_gpus_per_user: fields.max_per_user.value,
      idle_timeout_s: fields.idle.value === null ? null : fields.idle.value * 60,
    };
  }

  const FIELD_IDS = { guaranteed: "q-guaranteed", guaranteed_gpus: "q-guaranteed", guaranteed_milli: "q-guaranteed",
    limit: "q-limit", limit_gpus: "q-limit", limit_milli: "q-limit", weight: "q-weight",
    max_gpus_per_user: "q-max-per-user", max_per_user: "q-max-per-user", idle_timeout_s: "q-idle" };

  async function save(ev) {
    ev.preventDefault();
    const body = readQuota();
    if (!body) { document.querySelector("#quota-form [aria-invalid=true]")?.focus(); return; }
    try {
      await GP.saveQuota(editing, body);
      GP.formError("quota-error", "");
      GP.flash(`Saved the quota of ${editing}.`, "ok");
      await refresh();
    } catch (e) {
      const field = e.problem && (e.problem.field || (e.problem.errors && e.problem.errors[0] && e.problem.errors[0].field));
      if (field && FIELD_IDS[field]) GP.fieldError(FIELD_IDS[field], e.message);
      GP.formError("quota-error", GP.actionError(`change the quota of ${editing}`, e));
    }
  }

  async function createTenant(ev) {
    ev.preventDefault();
    const name = document.getElementById("t-name").value.trim();
    const g = GP.numberField("t-guaranteed", { label: "Guaranteed GPUs" });
    const l = GP.numberField("t-limit", { optional: true, label: "Limit GPUs" });
    const err = !name ? "Path: enter a tenant path such as physics/lab-a." : g.error || l.error;
    if (err) { GP.formError("tenant-error", err); return; }
    try {
      await GP.api("POST", "/tenants", { name, guaranteed_gpus: g.value, limit_gpus: l.value });
      GP.formError("tenant-error", "");
      GP.flash(`Created tenant ${name}.`, "ok");
      document.getElementById("t-name").value = "";
      await refresh();
    } catch (e) {
      GP.formError("tenant-error", GP.actionError(`create tenant ${name}`, e));
    }
  }

  GP.saveQuota = (name, body) => GP.api("PATCH", `/tenants/${enc(name)}/quota`, body);

  GP.ready.then((u) => {
    if (!u) return;
    document.getElementById("quota-form").addEventListener("submit", save);
    document.getElementById("quota-cancel").addEventListener("click", () => { document.getElementById("quota-editor").hidden = true; });
    if (GP.isAdmin(u)) {
      document.getElementById("tenant-creator").hidden = false;
      document.getElementById("tenant-form").addEventListener("submit", createTenant);
    }
    GP.poll(refresh, REFRESH_MS);
  });
})();
