/* Admin page: users and roles, API tokens, GPU sharing modes, profiles, idle policies,
 * audit events. Only admins see the link; the API refuses everyone else. */
"use strict";
(() => {
  const { h } = GP;
  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.users || x.tokens || x.gpus || x.events || x.profiles || x.tenants)) || []);
  let events = [];

  function section(id, fn) {
    return fn().catch((e) => {
      const sec = document.getElementById(id);
      const msg = e.status === 403 ? `Not allowed: only admins can see this section. ${e.message}` : `Could not load: ${e.message}`;
      sec.querySelector("table") ? GP.fillTable(sec.querySelector("table"), [], msg) : GP.flash(msg);
    });
  }

  async function users() {
    const us = items(await GP.get("/users"));
    GP.fillTable("users-table", us.map((u) => h("tr", {},
      h("th", { scope: "row" }, u.name), h("td", {}, u.admin ? "yes" : "no"),
      h("td", {}, (u.memberships || []).map((m) => `${m.tenant}: ${m.role}`).join(", ") || "—"))), "No users.");
    document.getElementById("m-user").replaceChildren(...us.map((u) => h("option", { value: u.name }, u.name)));
  }

  async function tenants() {
    const ts = items(await GP.get("/tenants"));
    document.getElementById("m-tenant").replaceChildren(...ts.map((t) => h("option", { value: t.name }, t.name)));
    GP.fillTable("idle-table", ts.map((t) => h("tr", {}, h("th", { scope: "row" }, t.name),
      h("td", {}, t.idle_timeout_s ? `cull after ${GP.duration(t.idle_timeout_s)} idle` : "never culled"))), "No tenants.");
  }

  async function tokens() {
    const ts = items(await GP.get("/tokens"));
    GP.fillTable("tokens-table", ts.map((t) => {
      const revoked = !!t.revoked_at;
      const expired = t.expires_at && t.expires_at < Date.now() / 1000;
      return h("tr", {}, h("td", { class: "id" }, t.id), h("td", {}, t.user), h("td", {}, t.name || "—"), h("td", { class: "when" }, GP.when(t.expires_at)),
        h("td", {}, revoked ? "revoked" : expired ? "expired" : "active"),
        h("td", {}, revoked ? null : h("button", { type: "button", class: "danger", onclick: () => revoke(t.id), "aria-label": `Revoke token ${t.id}` }, "Revoke")));
    }), "No tokens.");
  }

  async function revoke(id) {
    if (!confirm(`Revoke token ${id}? Programs using it stop working.`)) return;
    try { await GP.api("DELETE", `/tokens/${encodeURIComponent(id)}`); GP.flash(`Revoked token ${id}.`, "ok"); await tokens(); }
    catch (e) { GP.flash(GP.actionError(`revoke token ${id}`, e)); }
  }

  async function gpus() {
    const gs = items(await GP.get("/gpus"));
    GP.fillTable("gpus-table", gs.map((g) => {
      const sel = h("select", { "aria-label": `Sharing mode of ${g.node} GPU ${g.index}` },
        ["exclusive", "shared", "mig"].map((m) => h("option", { value: m, selected: m === g.sharing }, m)));
      const layout = h("input", { type: "text", value: g.mig_layout || "", placeholder: "all-1g.10gb", size: 14,
        "aria-label": `MIG layout of ${g.node} GPU ${g.index}` });
      return h("tr", {}, h("td", {}, g.node), h("td", {}, `${g.index} (${g.uuid})`), h("td", {}, g.model), h("td", {}, sel),
        h("td", {}, layout),
        h("td", {}, h("button", { type: "button", class: "secondary", onclick: () => setSharing(g, sel.value, layout.value.trim()) }, "Save")));
    }), "No GPUs registered.");
  }

  async function setSharing(g, mode, layout) {
    const body = { sharing: mode };
    if (mode === "mig" && layout !== (g.mig_layout || "")) body.mig_layout = layout;
    try { await GP.api("PATCH", `/gpus/${encodeURIComponent(g.uuid)}`, body); }
    catch (e) { GP.flash(GP.actionError(`set GPU ${g.index} on ${g.node} to ${mode}`, e)); return; }
    // the table shows the new mode before the message says so: an edit started after the
    // message is not lost to the table being drawn again
    try { await gpus(); }
    finally { GP.flash(`GPU ${g.index} on ${g.node} is now ${mode}${mode === "mig" && layout ? ` (${layout})` : ""}.`, "ok"); }
  }

  async function profiles() {
    const ps = items(await GP.get("/profiles"));
    GP.fillTable("profiles-table", ps.map((p) => h("tr", { dataset: { profile: p.name } }, h("th", { scope: "row" }, p.name), h("td", {}, p.kind),
      h("td", {}, GP.describeRequest(p.request || p)), h("td", {}, (p.tenants || []).join(", ") || "all"), h("td", {}, p.description || ""),
      h("td", {}, h("button", { type: "button", class: "danger", onclick: () => deleteProfile(p.name), "aria-label": `Delete profile ${p.name}` }, "Delete")))),
    "No profiles.");
  }

  async function deleteProfile(name) {
    if (!confirm(`Delete profile ${name}? Running notebooks keep running.`)) return;
    try { await GP.api("DELETE", `/profiles/${encodeURIComponent(name)}`); GP.flash(`Deleted profile ${name}.`, "ok"); await profiles(); }
    catch (e) { GP.flash(GP.actionError(`delete profile ${name}`, e)); }
  }

  async function createProfile(ev) {
    ev.preventDefault();
    const name = document.getElementById("p-name").value.trim();
    const gpus = GP.numberField("p-gpus", { optional: true, integer: true, label: "Whole GPUs" });
    const frac = GP.numberField("p-fraction", { optional: true, label: "GPU fraction" });
    const mem = GP.numberField("p-memory", { optional: true, label: "GPU memory" });
    const err = !name ? "Profile name: enter a name (letters, digits, - _ .)." : gpus.error || frac.error || mem.error
      || (gpus.value && frac.value ? "Give whole GPUs or a fraction, not both." : "");
    if (err) return GP.formError("profile-error", err);
    const body = { name, kind: document.getElementById("p-kind").value, description: document.getElementById("p-description").value.trim() };
    if (gpus.value) body.gpus = gpus.value;
    if (frac.value) body.gpu_fraction = frac.value;
    if (mem.value) body.gpu_memory_mib = Math.round(mem.value * 1024);
    try {
      await GP.api("POST", "/profiles", body);
      GP.formError("profile-error", "");
      GP.flash(`Added profile ${name}.`, "ok");
      await profiles();
    } catch (e) { GP.formError("profile-error", GP.actionError(`add profile ${name}`, e)); }
  }

  function renderEvents() {
    const f = document.getElementById("ev-filter").value.trim().toLowerCase();
    const shown = events.filter((e) => !f || [e.kind, e.user, e.tenant, e.workload_id, e.message].some((v) => v && String(v).toLowerCase().includes(f)));
    GP.fillTable("events-table", shown.slice(0, 300).map((e) => h("tr", {}, h("td", { class: "when" }, GP.when(e.at)), h("td", {}, e.kind),
      h("td", {}, e.user || "—"), h("td", { class: "tenant" }, e.tenant || "—"), h("td", { class: "id" }, e.workload_id || "—"), h("td", {}, e.message))), "No events.");
  }

  async function loadEvents() { events = items(await GP.get("/events?limit=200")).sort((a, b) => b.at - a.at); renderEvents(); }

  async function createUser(ev) {
    ev.preventDefault();
    const name = document.getElementById("u-name").value.trim();
    const password = document.getElementById("u-password").value;
    if (!name) return GP.formError("user-error", "Name: enter a user name (letters, digits, - _ . @).");
    if (password.length < 8) return GP.formError("user-error", "Password: use at least 8 characters.");
    try {
      await GP.api("POST", "/users", { name, password, admin: document.getElementById("u-admin").checked });
      GP.formError("user-error", "");
      GP.flash(`Created user ${name}.`, "ok");
      ev.target.reset();
      await users();
    } catch (e) { GP.formError("user-error", GP.actionError(`create user ${name}`, e)); }
  }

  async function addMember(ev) {
    ev.preventDefault();
    const user = document.getElementById("m-user").value, tenant = document.getElementById("m-tenant").value, role = document.getElementById("m-role").value;
    try {
      await GP.api("PUT", `/users/${encodeURIComponent(user)}/memberships/${tenant.split("/").map(encodeURIComponent).join("/")}`, { role });
      GP.formError("member-error", "");
      GP.flash(`${user} is now ${role} of ${tenant}.`, "ok");
      await users();
    } catch (e) { GP.formError("member-error", GP.actionError(`add ${user} to ${tenant}`, e)); }
  }

  async function createToken(ev) {
    ev.preventDefault();
    const days = GP.numberField("tok-days", { integer: true, min: 1, label: "Expires in days" });
    if (days.error) return GP.formError("token-error", days.error);
    try {
      const t = await GP.api("POST", "/tokens", { name: document.getElementById("tok-name").value.trim(), expires_in_s: days.value * 86400 });
      GP.formError("token-error", "");
      const out = document.getElementById("token-new");
      out.textContent = `New token (shown once; copy it now): ${t.token || t.secret}`;
      out.hidden = false;
      await tokens();
    } catch (e) { GP.formError("token-error", GP.actionError("create a token", e)); }
  }

  /** Non-admins see only what they may use here: their own tokens, and for tenant-admins the
   * members of their tenants and its events. Everything else is hidden, not just refused. */
  function limitTo(u) {
    const tenantAdmin = Object.values(GP.roles(u)).includes("tenant-admin");
    const keep = new Set(["tokens", ...(tenantAdmin ? ["users", "events"] : [])]);
    document.querySelectorAll("main section.card").forEach((sec) => { sec.hidden = !keep.has(sec.id); });
    document.querySelectorAll(".tabs a").forEach((a) => { a.hidden = !keep.has(a.getAttribute("href").slice(1)); });
    document.getElementById("user-form").hidden = true;
    GP.flash("Not allowed: the Admin page is for gpupool admins. "
      + (tenantAdmin ? "As a tenant-admin you can manage your tenants' members, see their events, and your own API tokens here."
        : "You can manage your own API tokens here; ask an admin for anything else."));
  }

  GP.ready.then((u) => {
    if (!u) return;
    const admin = GP.isAdmin(u);
    if (!admin) limitTo(u);
    document.getElementById("user-form").addEventListener("submit", createUser);
    document.getElementById("member-form").addEventListener("submit", addMember);
    document.getElementById("token-form").addEventListener("submit", createToken);
    document.getElementById("profile-form").addEventListener("submit", createProfile);
    document.getElementById("ev-filter").addEventListener("input", renderEvents);
    const visible = (id) => !document.getElementById(id).hidden;
    section("tokens", tokens);
    if (visible("users")) { section("users", users); section("tenants", tenants); }
    if (visible("events")) section("events", loadEvents);
    if (admin) { section("gpus", gpus); section("profiles", profiles); }
  });
})();
