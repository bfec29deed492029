/* Usage page: GPU utilization and memory over time (telemetry history), allocated vs busy
 * GPU-hours per tenant and per user (accounting), efficiency per user, CSV export.
 * Charts are drawn by Plotly, served from the installed `plotly` package. */
"use strict";
(() => {
  const { h } = GP;
  const REFRESH_MS = 30000;
  let rangeS = 86400;
  let last = { tenants: [], users: [], from: null, to: null };

  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.rows || x.groups)) || []);
  const hours = (s) => (s || 0) / 3600;
  const day = (t) => new Date(t * 1000).toISOString().slice(0, 10);
  const layout = (extra) => Object.assign({
    margin: { l: 55, r: 15, t: 10, b: 45 }, font: { family: "system-ui, sans-serif", size: 12, color: "#1a1d23" },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", legend: { orientation: "h", y: -0.2 }, hovermode: "closest",
  }, extra);
  const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"] };

  function draw(id, traces, lay, emptyMsg) {
    const el = document.getElementById(id);
    if (!window.Plotly) { el.textContent = "Charts are unavailable: the plotly package is not installed on the server."; return; }
    if (!traces.length) {
      window.Plotly.purge(el);
      el.replaceChildren(h("p", { class: "muted" }, emptyMsg));
      return;
    }
    if (el.firstChild && el.firstChild.nodeName === "P") el.replaceChildren();
    window.Plotly.react(el, traces, layout(lay), config);
  }

  function key(r) { return r.key ?? r.user ?? r.tenant ?? r.day ?? "?"; }
  const alloc = (r) => hours(r.gpu_seconds_allocated ?? (r.gpu_hours_allocated ?? 0) * 3600);
  const busy = (r) => hours(r.gpu_seconds_busy ?? (r.gpu_hours_busy ?? 0) * 3600);

  function bars(rows) {
    const keys = rows.map(key);
    return [
      { type: "bar", name: "allocated GPU-h", x: keys, y: rows.map(alloc), marker: { color: "#2563eb" } },
      { type: "bar", name: "busy GPU-h", x: keys, y: rows.map(busy), marker: { color: "#16a34a" } },
    ];
  }

  async function refresh() {
    const now = Date.now() / 1000;
    const from = now - rangeS;
    const q = `from=${day(from)}&to=${day(now)}`;
    const [hist, tenants, users] = await Promise.all([
      GP.get(`/dashboard/gpu-history?range_s=${rangeS}`),
      GP.get(`/usage?group_by=tenant&${q}`),
      GP.get(`/usage?group_by=user&${q}`),
    ]);
    const x = (s) => s.t.map((t) => new Date(t * 1000));
    draw("chart-util", hist.series.filter((s) => s.t.length).map((s) => ({ type: "scatter", mode: "lines", name: s.label, x: x(s), y: s.util })),
      { yaxis: { title: { text: "%" }, range: [0, 100] } }, "No telemetry for this range yet.");
    draw("chart-mem", hist.series.filter((s) => s.t.length).map((s) => ({ type: "scatter", mode: "lines", name: s.label, x: x(s), y: s.memory_used_mib.map((m) => (m === null ? null : m / 1024)) })),
      { yaxis: { title: { text: "GiB" }, rangemode: "tozero" } }, "No telemetry for this range yet.");
    const t = items(tenants), u = items(users);
    draw("chart-tenant", t.length ? bars(t) : [], { barmode: "group", yaxis: { title: { text: "GPU-hours" } } }, "No usage recorded in this range.");
    draw("chart-user", u.length ? bars(u) : [], { barmode: "group", yaxis: { title: { text: "GPU-hours" } } }, "No usage recorded in this range.");
    const eff = u.map((r) => ({ key: key(r), a: alloc(r), b: busy(r) })).sort((p, q2) => (p.a ? p.b / p.a : 1) - (q2.a ? q2.b / q2.a : 1));
    GP.fillTable("efficiency", eff.map((r) => h("tr", {},
      h("td", {}, r.key), h("td", { class: "num" }, r.a.toFixed(2)), h("td", { class: "num" }, r.b.toFixed(2)),
      h("td", { class: "num" }, r.a ? GP.pct((100 * r.b) / r.a) : "—"))), "No usage recorded in this range.");
    last = { tenants: t, users: u, from: day(from), to: day(now) };
  }

  function exportCsv() {
    const rows = [["group_by", "key", "from", "to", "gpu_hours_allocated", "gpu_hours_busy", "efficiency", "gpu_memory_mib_max"]];
    for (const [g, list] of [["tenant", last.tenants], ["user", last.users]]) {
      for (const r of list) {
        const a = alloc(r), b = busy(r);
        rows.push([g, key(r), last.from, last.to, a.toFixed(4), b.toFixed(4), a ? (b / a).toFixed(4) : "", r.gpu_memory_mib_max ?? ""]);
      }
    }
    GP.downloadCsv(`gpupool-usage-${last.from}-${last.to}.csv`, rows);
  }

  GP.ready.then((u) => {
    if (!u) return;
    let stop = GP.poll(refresh, REFRESH_MS);
    document.querySelectorAll("button.range").forEach((b) => b.addEventListener("click", () => {
      rangeS = Number(b.dataset.range);
      document.querySelectorAll("button.range").forEach((o) => o.setAttribute("aria-pressed", String(o === b)));
      stop();
      stop = GP.poll(refresh, REFRESH_MS);
    }));
    document.getElementById("export-csv").addEventListener("click", exportCsv);
  });
})();
