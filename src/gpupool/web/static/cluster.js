/* Cluster page: every node and GPU as a tile, refreshed every few seconds. */
"use strict";
(() => {
  const { h, badge } = GP;
  const REFRESH_MS = 3000;

  const statusText = { free: "free", busy: "in use", idle: "held but idle", down: "unhealthy", outside: "outside gpupool" };

  // Who holds a GPU outside gpupool: "slurm job 4711 (bob)", "pod team-x/train-0".
  const outsideText = (o) => (o.user ? `${o.ref} (${o.user})` : o.ref);

  function holderItem(x) {
    const share = x.mig_profile ? `MIG ${x.mig_profile} @${x.mig_start}`
      : x.milli >= 1000 ? "whole GPU" : `${+(x.milli / 1000).toFixed(3)} GPU`;
    const mem = x.milli < 1000 && x.memory_mib ? `, ${GP.gib(x.memory_mib)}` : "";
    return h("li", {},
      h("b", {}, x.user), " · ", x.tenant, " · ",
      h("a", { class: "id", href: `${GP.BASE}/workloads#${encodeURIComponent(x.workload)}` }, x.workload),
      h("br"), `${share}${mem} `,
      badge(`enforced: ${x.enforcement}`, `enf-${x.enforcement}`));
  }

  function migList(g) {
    if (!g.mig_instances || !g.mig_instances.length) return null;
    const free = g.mig_instances.filter((i) => !i.workload).length;
    return h("ul", { class: "mig", "aria-label": `MIG instances (${g.mig_layout}): ${free} of ${g.mig_instances.length} free` },
      g.mig_instances.map((i) => h("li", { class: i.workload ? "held" : "free", dataset: { start: i.start } },
        h("b", {}, i.profile), ` @${i.start} · `,
        i.workload ? [h("a", { class: "id", href: `${GP.BASE}/workloads#${encodeURIComponent(i.workload)}` }, i.workload), ` (${i.user})`] : "free",
        i.memory_used_mib !== null ? ` · ${GP.gib(i.memory_used_mib)} / ${GP.gib(i.memory_mib)}` : "")));
  }

  function tile(node, g) {
    const memPct = g.memory_used_mib !== null && g.memory_total_mib ? (100 * g.memory_used_mib) / g.memory_total_mib : null;
    const outside = g.outside ? `used outside gpupool by ${outsideText(g.outside)}` : null;
    const label = `GPU ${g.index} on ${node.name}: ${g.model}, ${g.status === "outside" ? outside : statusText[g.status]}`;
    const stateBadge = badge(statusText[g.status], `state-${g.status}`);
    if (outside) stateBadge.title = `Healthy, but ${outside}${g.outside.since ? ` since ${GP.when(g.outside.since)}` : ""}`;
    return h("li", { class: `gpu ${g.status}`, tabindex: "0", "aria-label": label, title: outside || undefined, dataset: { uuid: g.uuid, status: g.status } },
      h("header", {}, h("span", {}, `GPU ${g.index} · ${g.model}`),
        h("span", {}, stateBadge, g.simulated ? [" ", badge("simulated", "sim")] : null)),
      h("dl", { class: "metrics" },
        h("dt", {}, "Memory"), h("dd", {}, `${GP.gib(g.memory_used_mib)} / ${GP.gib(g.memory_total_mib)}`,
          h("div", { class: "bar", role: "presentation" }, h("span", { style: `width:${Math.min(100, memPct || 0)}%` }))),
        h("dt", {}, "Utilization"), h("dd", {}, GP.pct(g.util),
          h("div", { class: "bar", role: "presentation" }, h("span", { style: `width:${Math.min(100, g.util || 0)}%` }))),
        h("dt", {}, "Temperature"), h("dd", {}, g.temperature_c === null ? "—" : `${g.temperature_c} °C`),
        h("dt", {}, "Sharing"), h("dd", {}, g.mig_layout ? `mig · ${g.mig_layout}` : g.sharing),
        g.idle_for_s ? [h("dt", {}, "Idle for"), h("dd", {}, GP.duration(g.idle_for_s))] : null),
      migList(g),
      g.holders.length
        ? h("ul", { class: "holders", "aria-label": "Held by" }, g.holders.map(holderItem))
        : g.outside
          ? h("p", { class: "holders outside-by" }, "Outside gpupool: ", h("b", {}, g.outside.ref), g.outside.user ? ` · ${g.outside.user}` : "")
          : h("p", { class: "muted holders" }, "Not allocated"));
  }

  function render(view) {
    const s = view.summary;
    const sum = document.getElementById("summary");
    const item = (k, v) => h("div", {}, h("dt", {}, k), h("dd", {}, v));
    sum.replaceChildren(item("GPUs", s.gpus), item("Free", s.free), item("In use", s.busy),
      item("Held but idle", s.idle), item("Outside gpupool", s.outside || 0), item("Unhealthy", s.down), item("Allocated", `${GP.gpus(s.allocated_milli)} GPU${s.allocated_milli === 1000 ? "" : "s"}`),
      ...(view.simulated ? [item("Telemetry", "simulated GPUs")] : []));
    const nodes = document.getElementById("nodes");
    nodes.setAttribute("aria-busy", "false");
    if (!view.nodes.length) {
      nodes.replaceChildren(h("p", { class: "muted" }, "No nodes are registered yet."));
      return;
    }
    // Keep keyboard focus on the same tile across refreshes.
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.uuid : null;
    nodes.replaceChildren(...view.nodes.map((n) => h("section", { class: "node", "aria-label": `Node ${n.name}` },
      h("h2", {}, n.name, " ", badge(n.state, n.state === "ready" ? "state-free" : "state-down"),
        h("span", { class: "muted" }, `${n.gpus.length} GPU${n.gpus.length === 1 ? "" : "s"}`)),
      h("ul", { class: "gpus" }, n.gpus.map((g) => tile(n, g))))));
    if (focused) { const el = nodes.querySelector(`[data-uuid="${CSS.escape(focused)}"]`); if (el) el.focus(); }
  }

  // Node pools (issue 34): each pool's nodes by state and its requests in flight; the section
  // stays hidden where no pool is defined.
  function requestText(r) {
    const n = `${r.count} node${r.count === 1 ? "" : "s"}${r.atomic ? " (all or none)" : ""}`;
    const who = r.workload_count ? ` for ${r.workload_count} waiting workload${r.workload_count === 1 ? "" : "s"}` : "";
    return `${n}${who}, asked ${GP.when(r.requested_at)}, withdrawn ${GP.when(r.deadline)} unless fulfilled`;
  }

  function renderPools(pools) {
    const section = document.getElementById("pools-section");
    section.hidden = !pools.length;
    if (!pools.length) return;
    document.getElementById("pools-count").textContent = `(${pools.length})`;
    const num = (v, cls) => h("td", { class: "num" }, v ? badge(String(v), cls) : "0");
    document.querySelector("#pools tbody").replaceChildren(...pools.map((p) => {
      const c = p.counts;
      const shape = p.gpus ? `${p.gpus} × ${p.gpu_model}` : `${p.cpus} CPUs`;
      return h("tr", { dataset: { pool: p.name } },
        h("th", { scope: "row" }, p.name),
        h("td", {}, shape, h("br"), h("span", { class: "muted" }, `boots in ~${GP.duration(p.boot_seconds)}`)),
        num(c.up, "state-free"), num(c.requested, "state-idle"), num(c.booting, "state-idle"),
        num(c.powered_down, "state-down"),
        h("td", {}, `${p.nodes.length} (${p.min_nodes}–${p.max_nodes})`),
        h("td", {}, p.requests.length
          ? h("ul", { class: "requests" }, p.requests.map((r) => h("li", { dataset: { request: r.id } }, requestText(r))))
          : h("span", { class: "muted" }, "none")));
    }));
  }

  GP.ready.then((u) => {
    if (!u) return;
    GP.poll(async () => {
      const [view, pools] = await Promise.all([GP.get("/dashboard/cluster"), GP.get("/node-pools")]);
      render(view); renderPools(pools); GP.stamp();
    }, REFRESH_MS);
    // The landing page fetches the chart bundle when idle, so the Usage page finds it cached.
    GP.whenIdle(() => document.head.append(h("link", { rel: "prefetch", href: `${GP.BASE}/vendor/plotly.min.js`, as: "script" })));
  });
})();
