/* Queue page: pending workloads in order with why they wait, and running workloads.
 * The API returns only what the role may see (members: their own; tenant-admins: their
 * tenant; admins: all). */
"use strict";
(() => {
  const { h } = GP;
  const REFRESH_MS = 3000;
  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.pending || x.workloads)) || []);
  const wlink = (id) => h("a", { href: `${GP.BASE}/workloads#${encodeURIComponent(id)}` }, id);

  // What a workload holds: "n1: GPU 0, 1" on one node; a multi-node workload (a gang) lists
  // its shares by node in rank order, "n1: GPU 0, 1; n2: GPU 0, 1".
  function holds(w) {
    const a = w.allocation;
    if (!a) return GP.asks(w.request);
    const shares = a.shares || [];
    const nodeOf = (s) => s.node || a.node;
    const gpu = (s) => `${s.gpu_index}${s.milli < 1000 ? ` (${+(s.milli / 1000).toFixed(3)})` : ""}`;
    const nodes = [...new Set([...(a.nodes || []), a.node, ...shares.map(nodeOf)])];
    return nodes.map((n) => {
      const gpus = shares.filter((s) => nodeOf(s) === n).map(gpu).join(", ");
      return `${n}${gpus ? `: GPU ${gpus}` : ""}`;
    }).join("; ");
  }

  // The forecast as "in ~12 min, by 40 min at the latest" (its text and basis on hover);
  // "—" until the forecast loop has seen it (docs/user-guide.md "When will it start?").
  function starts(f, now) {
    if (!f) return h("td", {}, "—");
    const at = (iso) => (iso ? Date.parse(iso) / 1000 : null);
    const exp = at(f.expected), late = at(f.latest);
    let text;
    if (exp === null) text = `after ${GP.duration(Math.max(0, at(f.until) - now))}`;
    else {
      text = exp - now < 60 ? "now" : `in ~${GP.duration(exp - now)}`;
      if (late !== null && late - exp >= 60 && late - now >= 60) text += `, by ${GP.duration(late - now)} at the latest`;
    }
    return h("td", { title: `${f.text}; ${f.basis}` }, text);
  }

  async function refresh() {
    const [queue, running] = await Promise.all([
      GP.get("/queue"),
      GP.get("/workloads?state=running&state=starting&state=admitted&limit=1000"),
    ]);
    const now = Date.now() / 1000;
    // Queue entries are {position, tenant_position, reason, workload}.
    const pending = items(queue).map((e) => (e.workload ? { ...e.workload, position: e.position, tenant_position: e.tenant_position, why: e.reason, forecast: e.forecast } : e));
    GP.fillTable("pending", pending.map((w) => h("tr", {},
      h("td", { class: "num" }, w.position ?? (w.pending && w.pending.position) ?? "—"),
      h("td", { class: "id" }, wlink(w.id), w.name ? ` ${w.name}` : ""),
      h("td", {}, w.owner), h("td", { class: "tenant" }, w.tenant),
      h("td", { class: "asks", title: GP.describeRequest(w.request || w) }, GP.asks(w.request || w)),
      h("td", { class: "num" }, w.priority ?? 0),
      h("td", {}, GP.duration(now - (w.submitted_at || now))),
      starts(w.forecast || (w.pending && w.pending.forecast), now),
      h("td", {}, w.why || (w.pending && w.pending.reason) || "waiting for the next scheduling cycle"))),
    "Nothing is waiting.");
    const run = items(running);
    GP.fillTable("running", run.map((w) => h("tr", {},
      h("td", { class: "id" }, wlink(w.id)), h("td", {}, w.owner), h("td", { class: "tenant" }, w.tenant), h("td", {}, w.kind),
      h("td", {}, holds(w)), h("td", {}, w.state),
      h("td", {}, GP.duration(now - (w.started_at || w.admitted_at || now))))),
    "Nothing is running.");
    document.getElementById("pending-count").textContent = `(${pending.length})`;
    document.getElementById("running-count").textContent = `(${run.length})`;
    GP.stamp();
  }

  GP.ready.then((u) => {
    if (!u) return;
    const scope = document.getElementById("scope");
    scope.textContent = GP.isAdmin(u) ? "You see every tenant's queue."
      : Object.values(GP.roles(u)).some((r) => r === "tenant-admin") ? "You see the queues of the tenants you administer and your own work."
      : "You see the work your role lets you see.";
    GP.poll(refresh, REFRESH_MS);
  });
})();
