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
  // The API gives quotas in GPUs (fractions allowed); `live` adds the fair share and the
  // GPUs actually busy per tenant (milli) from /dashboard/tenants.
  let live = {};
  const q = (t) => t.quota || {};
  const num = (v) => (v === null || v === undefined ? null : v);
  const gpuCell = (v, none = "—") => h("td", { class: "num" }, v === null || v === undefined ? none : `${+Number(v).toFixed(3)}`);
  /** GPUs held now; beyond the guarantee the tenant borrows others' idle share (the CLI's
   * `tenant ls` shows IN USE beside GUARANTEED): marked "borrowing N". */
  function allocatedCell(t) {
    const held = Number(t.allocated_gpus ?? 0);
    const over = held - Number(q(t).guaranteed ?? 0);
    return h("td", { class: "num" }, `${+held.toFixed(3)}`,
      over > 1e-9 ? [" ", GP.badge(`borrowing ${+over.toFixed(3)}`, "borrowing")] : null);
  }

  /** Pending work: how many workloads wait, and the GPUs they ask for. */
  function pendingCell(t) {
    const n = t.pending ?? 0;
    const g = Number(t.pending_gpus ?? 0);
    return h("td", { class: "num" }, n ? `${n}${g ? ` (${+g.toFixed(3)} GPU${g === 1 ? "" : "s"})` : ""}` : "0");
  }

  function render() {
    const u = GP.me();
    GP.fillTable("tenants", tenants.map((t) => {
      const depth = (t.name.match(/\//g) || []).length;
      const may = GP.canAdminTenant(t.name, u);
      return h("tr", { class: `depth-${Math.min(depth, 3)}`, dataset: { tenant: t.name } },
        h("th", { scope: "row" }, t.name),
        gpuCell(q(t).guaranteed ?? 0),
        gpuCell(live[t.name] ? live[t.name].fair_share_milli / 1000 : null),
        gpuCell(num(q(t).limit), "none"),
        h("td", { class: "num" }, q(t).weight ?? 1),
        gpuCell(num(q(t).max_per_user)),
        allocatedCell(t),
        gpuCell(live[t.name] ? live[t.name].busy_milli / 1000 : null),
        h("td", { class: "num" }, t.running ?? 0),
        pendingCell(t),
        h("td", {}, may ? h("button", { type: "button", class: "secondary", onclick: () => openEditor(t), "aria-label": `Edit quota of ${t.name}` }, "Edit") : null));
    }), "No tenants yet.");
  }

  async function refresh() {
    const [ts, lv] = await Promise.all([GP.get("/tenants"), GP.get("/dashboard/tenants").catch(() => ({ tenants: {} }))]);
    tenants = items(ts).sort((a, b) => a.name.localeCompare(b.name));
    live = lv.tenants || {};
    render();
    GP.stamp();
    timeRules().catch(() => {});
  }

  /** Budgets (tenant-admins and admins see them) and reservations (issue 35): the list shows
   * those not over; the calendar (calendar.js) all that fall in its range. */
  async function timeRules() {
    const [bs, rs] = await Promise.all([GP.get("/budgets").catch(() => []), GP.get("/reservations?past=true")]);
    const hrs = (x) => (Math.round(x * 10) / 10).toString();
    document.getElementById("budgets-section").hidden = !bs.length;
    GP.fillTable("budgets", bs.map((b) => h("tr", { class: b.over ? "over" : "" },
      h("td", {}, b.tenant), h("td", {}, b.period_label), h("td", {}, b.model || "all"),
      h("td", { class: "num" }, `${hrs(b.used_gpu_hours)} / ${hrs(b.gpu_hours)}`),
      h("td", {}, b.over ? h("span", { class: "badge borrowing" }, `over: ${b.mode}`) : b.mode),
      h("td", {}, GP.when(b.resets_at)))), "No budgets.");
    GP.calendar(rs);
    GP.fillTable("reservations", rs.filter((r) => r.state !== "over").map((r) => h("tr", {},
      h("td", {}, r.name || r.id), h("td", {}, r.users.length ? `${r.tenant} (${r.users.join(", ")})` : r.tenant),
      h("td", { class: "num" }, `${r.gpus}${r.model ? " " + r.model : ""}`),
      h("td", {}, GP.when(r.start)), h("td", {}, GP.when(r.end)), h("td", {}, r.state))), "No reservations.");
  }

  function setVal(id, v) { document.getElementById(id).value = v === null || v === undefined ? "" : String(v); }

  function openEditor(t) {
    editing = t.name;
    document.getElementById("quota-tenant").textContent = t.name;
    setVal("q-guaranteed", q(t).guaranteed ?? 0);
    setVal("q-limit", num(q(t).limit));
    setVal("q-weight", q(t).weight ?? 1);
    setVal("q-max-per-user", num(q(t).max_per_user));
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
    if (fields.idle.value === 0) { GP.fieldError("q-idle", "Idle timeout: must be above 0 minutes, or empty to never cull."); return null; }
    const t = tenants.find((x) => x.name === editing) || {};
    const body = {
      quota: {
        guaranteed: fields.guaranteed.value,
        limit: fields.limit.value,
        weight: fields.weight.value,
        max_per_user: fields.max_per_user.value,
        guaranteed_by_model: q(t).guaranteed_by_model || {},
      },
    };
    if (fields.idle.value === null) body.clear_idle_timeout = true;
    else body.idle_timeout_s = fields.idle.value * 60;
    return body;
  }

  // API field names (last part of the error's path) -> inputs.
  const FIELD_IDS = { guaranteed: "q-guaranteed", limit: "q-limit", weight: "q-weight",
    max_per_user: "q-max-per-user", max_gpus_per_user: "q-max-per-user", idle_timeout_s: "q-idle" };

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
      const p = e.problem || {};
      const fields = [p.field, ...(p.errors || []).map((x) => x.field)].filter(Boolean).map((f) => String(f).split(".").pop());
      for (const f of fields) if (FIELD_IDS[f]) GP.fieldError(FIELD_IDS[f], e.message);
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
      await GP.api("POST", "/tenants", { name, quota: { guaranteed: g.value, limit: l.value } });
      GP.formError("tenant-error", "");
      GP.flash(`Created tenant ${name}.`, "ok");
      document.getElementById("t-name").value = "";
      await refresh();
    } catch (e) {
      GP.formError("tenant-error", GP.actionError(`create tenant ${name}`, e));
    }
  }

  GP.saveQuota = (name, body) => GP.api("PATCH", `/tenants/${enc(name)}`, body);

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
