/* My workloads page: submit a job, start a notebook from a profile, cancel, read logs. */
"use strict";
(() => {
  const { h } = GP;
  const REFRESH_MS = 3000;
  const ACTIVE = new Set(["pending", "admitted", "starting", "running"]);
  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.workloads || x.profiles)) || []);
  let logsFor = null;
  let landedOn = null;

  /** Split a command line like a POSIX shell does for words and quotes (no expansion). */
  function splitCommand(s) {
    const out = [];
    let cur = "", inWord = false, quote = null;
    for (let i = 0; i < s.length; i++) {
      const c = s[i];
      if (quote) {
        if (c === quote) quote = null;
        else if (c === "\\" && quote === '"' && i + 1 < s.length) cur += s[++i];
        else cur += c;
      } else if (c === "'" || c === '"') { quote = c; inWord = true; }
      else if (c === "\\" && i + 1 < s.length) { cur += s[++i]; inWord = true; }
      else if (/\s/.test(c)) { if (inWord) { out.push(cur); cur = ""; inWord = false; } }
      else { cur += c; inWord = true; }
    }
    if (quote) throw new Error(`the command has an unclosed ${quote} quote`);
    if (inWord) out.push(cur);
    return out;
  }

  function submitTenants(u) {
    const rs = GP.roles(u);
    const mine = Object.entries(rs).filter(([, r]) => r === "member" || r === "tenant-admin").map(([t]) => t);
    return mine.length ? mine : Object.keys(rs);
  }

  function fillTenantSelect(id, names) {
    const sel = document.getElementById(id);
    sel.replaceChildren(...names.map((t) => h("option", { value: t }, t)));
  }

  async function loadTenantsForAdmin(u) {
    if (!GP.isAdmin(u)) return submitTenants(u);
    try {
      const all = items(await GP.get("/tenants")).map((t) => t.name);
      return all.length ? all : submitTenants(u);
    } catch { return submitTenants(u); }
  }

  async function loadProfiles() {
    const box = document.getElementById("profiles");
    const legend = box.querySelector("legend");
    let ps = [];
    try { ps = items(await GP.get("/profiles")); } catch (e) { box.replaceChildren(legend, h("p", { class: "error" }, `Could not load profiles: ${e.message}`)); return; }
    if (!ps.length) { box.replaceChildren(legend, h("p", { class: "muted" }, "No profiles are defined; ask an admin to add one.")); return; }
    box.replaceChildren(legend, ...ps.map((p, i) => h("label", { class: "profile-opt" },
      h("input", { type: "radio", name: "profile", value: p.name, checked: i === 0 }), " ",
      h("b", {}, p.name), ` — ${p.description || GP.describeRequest(p.request || p)}`)));
  }

  async function refresh() {
    const u = GP.me();
    const all = document.getElementById("show-finished").checked;
    const q = `/workloads?user=${encodeURIComponent(u.name)}&limit=500${all ? "" : "&state=pending&state=admitted&state=starting&state=running"}`;
    const ws = items(await GP.get(q));
    // An open log panel follows the output of work that is still active.
    const followed = logsFor && ws.find((w) => w.id === logsFor);
    if (followed && ACTIVE.has(followed.state)) showLogs(logsFor, true);
    GP.fillTable("mine", ws.map((w) => {
      const active = ACTIVE.has(w.state);
      const result = active ? ((w.pending && w.pending.reason) || (w.preemption && w.preemption.reason) || w.reason || "") : `${w.reason || ""}${w.exit_code !== null && w.exit_code !== undefined ? ` (exit ${w.exit_code})` : ""}`;
      return h("tr", { id: w.id, tabindex: "-1", dataset: { id: w.id, state: w.state } },
        h("th", { scope: "row" }, h("span", { class: "id" }, w.id), w.name ? ` ${w.name}` : ""), h("td", {}, w.kind), h("td", {}, w.owner), h("td", { class: "tenant" }, w.tenant),
        h("td", { class: "asks", title: GP.describeRequest(w.request || w) }, GP.asks(w.request || w)), h("td", {}, GP.badge(w.state, `st-${w.state}`)), h("td", {}, result),
        h("td", {},
          active ? h("button", { type: "button", class: "danger", onclick: () => cancel(w.id), "aria-label": `Cancel ${w.id}` }, "Cancel") : null, " ",
          w.kind === "job" ? h("button", { type: "button", class: "secondary", onclick: () => showLogs(w.id), "aria-label": `Logs of ${w.id}` }, "Logs") : null,
          w.url ? h("a", { href: w.url, target: "_blank", rel: "noopener" }, "Open") : null));
    }), all ? "You have no workloads." : "You have no active workloads. Tick “Show finished” to see older ones.");
    // A link such as /dashboard/workloads#w-abc (from the Cluster or Queue page) lands on its row.
    const wanted = location.hash ? decodeURIComponent(location.hash.slice(1)) : null;
    const target = wanted && document.getElementById(wanted);
    if (target) {
      target.classList.add("target");
      if (landedOn !== wanted) { landedOn = wanted; target.scrollIntoView({ block: "center" }); target.focus(); }
    }
  }

  async function cancel(id) {
    if (!confirm(`Cancel workload ${id}?`)) return;
    try {
      await GP.api("DELETE", `/workloads/${encodeURIComponent(id)}`);
      GP.flash(`Cancelled ${id}.`, "ok");
      await refresh();
    } catch (e) { GP.flash(GP.actionError(`cancel ${id}`, e)); }
  }

  /** Open the log panel for `id`; `follow` refreshes it in place (no focus move) while open. */
  async function showLogs(id, follow = false) {
    logsFor = id;
    document.getElementById("logs-id").textContent = id;
    const panel = document.getElementById("logs-panel");
    panel.hidden = false;
    const pre = document.getElementById("logs");
    try {
      const r = await GP.get(`/workloads/${encodeURIComponent(id)}/logs?tail=2000`);
      pre.textContent = typeof r === "string" ? r : r.text ?? r.logs ?? r.lines?.join("\n") ?? JSON.stringify(r);
      if (!pre.textContent) pre.textContent = "(no output yet)";
    } catch (e) { pre.textContent = GP.actionError(`read the logs of ${id}`, e); }
    if (!follow) pre.focus();
  }

  async function submitJob(ev) {
    ev.preventDefault();
    const ids = ["j-command", "j-gpus", "j-fraction", "j-memory", "j-priority", "j-tenant"];
    ids.forEach((i) => GP.fieldError(i, ""));
    GP.formError("job-error", "");
    let command;
    try { command = splitCommand(document.getElementById("j-command").value.trim()); } catch (e) { GP.fieldError("j-command", `Command: ${e.message}.`); return; }
    if (!command.length) { GP.fieldError("j-command", "Command: enter the command to run, e.g. python train.py."); document.getElementById("j-command").focus(); return; }
    const gpus = GP.numberField("j-gpus", { optional: true, integer: true, label: "Whole GPUs" });
    const frac = GP.numberField("j-fraction", { optional: true, label: "Fraction" });
    const mem = GP.numberField("j-memory", { optional: true, label: "GPU memory" });
    const prio = GP.numberField("j-priority", { optional: true, integer: true, min: -1000, label: "Priority" });
    const errs = [["j-gpus", gpus], ["j-fraction", frac], ["j-memory", mem], ["j-priority", prio]].filter(([, r]) => r.error);
    if (prio.value !== null && prio.value > 1000) errs.push(["j-priority", { error: "Priority: must be between -1000 and 1000." }]);
    errs.forEach(([id, r]) => GP.fieldError(id, r.error));
    if (errs.length) return;
    if (frac.value !== null && frac.value > 0 && (frac.value >= 1)) { GP.fieldError("j-fraction", "Fraction: must be above 0 and below 1; for whole GPUs use “Whole GPUs”."); return; }
    if (frac.value && gpus.value) { GP.fieldError("j-fraction", "Ask for whole GPUs or a fraction of one, not both: clear one of the two fields."); return; }
    // The API takes the resources at the top level of the workload (gpus, gpu_fraction, ...).
    const body = { kind: "job", command, tenant: document.getElementById("j-tenant").value, priority: prio.value ?? 0 };
    if (frac.value) body.gpu_fraction = frac.value; else if (gpus.value) body.gpus = gpus.value;
    if (mem.value) body.gpu_memory_mib = Math.round(mem.value * 1024);
    const model = document.getElementById("j-model").value.trim();
    if (model) body.gpu_model = model;
    try {
      const w = await GP.api("POST", "/workloads", body);
      GP.flash(`Submitted ${w.id}${w.state ? ` (${w.state})` : ""}.`, "ok");
      await refresh();
    } catch (e) { GP.formError("job-error", GP.actionError("submit this job", e)); }
  }

  /** Where JupyterHub's spawn page is, when the hub runs beside gpupool (null otherwise). */
  let hubSpawn = null;

  async function findHub() {
    try { hubSpawn = (await GP.get("/dashboard/hub")).spawn_url || null; } catch { hubSpawn = null; }
    if (!hubSpawn) return;
    document.getElementById("nb-hub").hidden = false;
    document.getElementById("nb-start").textContent = "Start notebook in JupyterHub";
  }

  async function startNotebook(ev) {
    ev.preventDefault();
    const p = document.querySelector("input[name=profile]:checked");
    if (!p) { GP.formError("notebook-error", "Pick a profile first."); return; }
    if (hubSpawn) {
      // The hub starts notebooks: its spawn page, given the options, spawns this one (it
      // waits in gpupool's queue there). gpupool refuses one submitted here (403).
      const q = new URLSearchParams({ "opt-profile": p.value, "opt-tenant": document.getElementById("nb-tenant").value });
      location.assign(`${hubSpawn}?${q}`);
      return;
    }
    try {
      const w = await GP.api("POST", "/workloads", { kind: "notebook", profile: p.value, tenant: document.getElementById("nb-tenant").value });
      GP.formError("notebook-error", "");
      GP.flash(`Started notebook ${w.id}${w.state ? ` (${w.state})` : ""}.`, "ok");
      await refresh();
    } catch (e) { GP.formError("notebook-error", GP.actionError("start a notebook", e)); }
  }

  GP.splitCommand = splitCommand;
  GP.ready.then(async (u) => {
    if (!u) return;
    const ts = await loadTenantsForAdmin(u);
    fillTenantSelect("j-tenant", ts);
    fillTenantSelect("nb-tenant", ts);
    if (!GP.canSubmit(u)) {
      const msg = "Your role is read-only (viewer): you can look, but not submit work. Ask a tenant admin to make you a member.";
      for (const id of ["job-error", "notebook-error"]) GP.formError(id, msg);
    }
    document.getElementById("job-form").addEventListener("submit", submitJob);
    document.getElementById("notebook-form").addEventListener("submit", startNotebook);
    document.getElementById("show-finished").addEventListener("change", refresh);
    document.getElementById("logs-refresh").addEventListener("click", () => logsFor && showLogs(logsFor));
    document.getElementById("logs-close").addEventListener("click", () => { document.getElementById("logs-panel").hidden = true; logsFor = null; });
    loadProfiles();
    findHub();
    GP.poll(refresh, REFRESH_MS);
  });
})();
