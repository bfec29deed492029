/* Usage page: GPU utilization and memory over time (telemetry history), allocated vs busy
 * GPU-hours per tenant and per user (accounting), efficiency per user, CSV export.
 *
 * Charts are drawn by Plotly, served from the installed `plotly` package. Its bundle is large
 * (~4.8 MB), so it is loaded only after the numbers are on screen: the efficiency table and
 * CSV export never wait for it, and the charts fill in as soon as it is ready.
 *
 * Busy time is partly estimated for MPS shares (docs/telemetry.md, "Busy time under MPS"):
 * as in `gpupool usage`, such values are marked ~ (with a title and a note saying why), and
 * rows with busy time neither measured nor estimated show — (unknown), not 0. */
"use strict";
(() => {
  const { h } = GP;
  const REFRESH_MS = 30000;
  const CHARTS = ["chart-util", "chart-mem", "chart-tenant", "chart-user"];
  let rangeS = 86400;
  let last = { tenants: [], users: [], from: null, to: null };
  let plotly = null;
  // Set once this browser has run the chart bundle: it is then in the HTTP cache and V8's code
  // cache, cheap enough to start at once. A first visit loads it after the numbers instead.
  const SEEN_KEY = "gpupool.charts-seen";

  const items = (x) => (Array.isArray(x) ? x : (x && (x.items || x.rows || x.groups)) || []);
  const hours = (s) => (s || 0) / 3600;
  const day = (t) => new Date(t * 1000).toISOString().slice(0, 10);
  const layout = (extra) => Object.assign({
    margin: { l: 55, r: 15, t: 10, b: 45 }, font: { family: "system-ui, sans-serif", size: 12, color: "#1a1d23" },
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", legend: { orientation: "h", y: -0.2 }, hovermode: "closest",
  }, extra);
  const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"] };

  /** Load Plotly once (a script from this server, allowed by the page's CSP). */
  function loadPlotly() {
    if (!plotly) {
      plotly = new Promise((resolve, reject) => {
        const s = h("script", { src: `${GP.BASE}/vendor/plotly.min.js` });
        s.addEventListener("load", () => {
          if (!window.Plotly) { reject(new Error("no Plotly")); return; }
          localStorage.setItem(SEEN_KEY, "1");
          resolve(window.Plotly);
        });
        s.addEventListener("error", () => reject(new Error("the chart library could not be loaded")));
        document.head.append(s);
      });
    }
    return plotly;
  }

  function placeholder(id, msg, cls = "muted") {
    const el = document.getElementById(id);
    if (window.Plotly && el.classList.contains("js-plotly-plot")) window.Plotly.purge(el);
    el.replaceChildren(h("p", { class: cls }, msg));
  }

  function draw(P, id, traces, lay, emptyMsg) {
    if (!traces.length) { placeholder(id, emptyMsg); return; }
    const el = document.getElementById(id);
    if (el.firstChild && el.firstChild.nodeName === "P") el.replaceChildren();
    const t0 = performance.now();
    P.react(el, traces, layout(lay), config);
    performance.measure(`draw ${id}`, { start: t0 }); // visible in the browser's performance tools
  }

  function key(r) { return r.key ?? r.user ?? r.tenant ?? r.day ?? "?"; }
  const alloc = (r) => hours(r.gpu_seconds_allocated ?? (r.gpu_hours_allocated ?? 0) * 3600);
  const busy = (r) => hours(r.gpu_seconds_busy ?? (r.gpu_hours_busy ?? 0) * 3600);
  // GPU-hours whose busy time was estimated, not measured (MPS shares); a /usage row or a
  // chargeback row. Rows of a server without the fields count as measured.
  const estimated = (r) => hours(r.gpu_seconds_estimated ?? (r.gpu_hours_estimated ?? 0) * 3600);
  const known = (r) => (r.gpu_seconds_measured ?? 1) + (r.gpu_seconds_estimated ?? 0) > 0;
  const ESTIMATED_TITLE = "Partly estimated, not measured: MPS shares get their MPS server's GPU use split by share size (docs/telemetry.md, \"Busy time under MPS\")";

  /** A number cell: "—" where unknown, "~text" with a title where partly estimated. */
  function busyCell(text, isKnown, est) {
    if (!isKnown) return h("td", { class: "num", title: "No busy time measured or estimated: unknown, not idle" }, "—");
    if (est > 0) return h("td", { class: "num estimated", title: `${ESTIMATED_TITLE}: ${est.toFixed(2)} of the allocated GPU-h` }, `~${text}`);
    return h("td", { class: "num" }, text);
  }

  function showNote(id, on) { document.getElementById(id).hidden = !on; }

  function bars(rows) {
    const keys = rows.map(key);
    const est = rows.map(estimated);
    const ok = rows.map(known);
    const anyEst = est.some((e) => e > 0);
    // A row with busy time neither measured nor estimated gets no busy bar (a 0 bar would
    // read as idle) and says "unknown" in its hover, as the tables show "—".
    return [
      { type: "bar", name: "allocated GPU-h", x: keys, y: rows.map(alloc), marker: { color: "#2563eb" } },
      {
        type: "bar", name: anyEst ? "busy GPU-h (~ partly estimated)" : "busy GPU-h", x: keys,
        y: rows.map((r, i) => (ok[i] ? busy(r) : null)),
        marker: { color: "#16a34a" }, text: est.map((e) => (e > 0 ? "~" : "")), textposition: "outside",
        customdata: rows.map((r, i) => (!ok[i] ? "unknown (neither measured nor estimated)"
          : `${est[i] > 0 ? "~" : ""}${busy(r).toFixed(2)} GPU-h${est[i] > 0 ? `<br>~ ${est[i].toFixed(2)} GPU-h estimated (MPS shares)` : ""}`)),
        hovertemplate: "%{x}: busy %{customdata}<extra></extra>",
      },
    ];
  }

  function drawCharts(P, hist, t, u) {
    const gpuh = { barmode: "group", yaxis: { title: { text: "GPU-hours" } } };
    draw(P, "chart-tenant", t.length ? bars(t) : [], gpuh, "No usage recorded in this range.");
    draw(P, "chart-user", u.length ? bars(u) : [], gpuh, "No usage recorded in this range.");
    // Utilization: one heatmap row per GPU (readable with 64 GPUs, one trace to draw).
    const x = hist.t.map((v) => new Date(v * 1000));
    const withData = hist.series.filter((s) => s.util.some((v) => v !== null));
    draw(P, "chart-util", withData.length ? [{
      type: "heatmap", x, y: withData.map((s) => s.label), z: withData.map((s) => s.util),
      zmin: 0, zmax: 100, colorscale: "Viridis", colorbar: { title: { text: "%" } },
      hovertemplate: "%{y}<br>%{x}<br>%{z:.0f}%<extra></extra>",
    }] : [], { margin: { l: 150, r: 10, t: 10, b: 40 }, yaxis: { automargin: true } }, "No telemetry for this range yet.");
    // Memory: GiB used per node (the sum of its GPUs).
    const byNode = new Map();
    for (const s of hist.series) {
      const acc = byNode.get(s.node) || hist.t.map(() => null);
      s.memory_used_mib.forEach((m, i) => { if (m !== null) acc[i] = (acc[i] || 0) + m / 1024; });
      byNode.set(s.node, acc);
    }
    const mem = [...byNode].filter(([, ys]) => ys.some((v) => v !== null))
      .map(([node, ys]) => ({ type: "scatter", mode: "lines", name: node, x, y: ys }));
    draw(P, "chart-mem", mem, { yaxis: { title: { text: "GiB used" }, rangemode: "tozero" } }, "No telemetry for this range yet.");
  }

  /** A server younger than the range asked: the charts span its age (the server says so). */
  function rangeNote(hi) {
    const note = document.getElementById("range-note");
    const asked = hi.asked_range_s ?? hi.range_s;
    note.hidden = !(hi.range_s < asked);
    if (!note.hidden) {
      const label = document.querySelector("button.range[aria-pressed='true']")?.textContent || GP.duration(asked);
      note.textContent = `This server's telemetry starts ${GP.when(hi.covered_from)}, less than ${label} ago: the charts show the ${GP.duration(hi.range_s)} since.`;
    }
  }

  async function refresh() {
    const now = Date.now() / 1000;
    const from = now - rangeS;
    const q = `from=${day(from)}&to=${day(now)}`;
    // The history is only for the charts: it loads beside the chart library, after the numbers.
    const [tenants, users] = await Promise.all([
      GP.get(`/usage?group_by=tenant&${q}`),
      GP.get(`/usage?group_by=user&${q}`),
    ]);
    const t = items(tenants), u = items(users);
    // Least efficient first; rows whose efficiency is unknown last.
    const rank = (r) => (!r.known ? 2 : r.a ? r.b / r.a : 1);
    const eff = u.map((r) => ({ key: key(r), a: alloc(r), b: busy(r), e: estimated(r), known: known(r) }))
      .sort((p, p2) => rank(p) - rank(p2));
    GP.fillTable("efficiency", eff.map((r) => h("tr", {},
      h("td", {}, r.key), h("td", { class: "num" }, r.a.toFixed(2)), busyCell(r.b.toFixed(2), r.known, r.e),
      r.a ? busyCell(GP.pct((100 * r.b) / r.a), r.known, r.e) : h("td", { class: "num" }, "—"))),
    "No usage recorded in this range.");
    showNote("eff-estimated", eff.some((r) => r.e > 0 || !r.known));
    last = { tenants: t, users: u, from: day(from), to: day(now) };
    chargeback().catch((e) => GP.fillTable("chargeback", [], `The chargeback could not be read: ${e.message}`));
    const hist = GP.get(`/dashboard/gpu-history?range_s=${rangeS}`);
    const t0 = performance.now();
    hist.then(rangeNote, () => {});
    Promise.all([loadPlotly(), hist]).then(([P, hi]) => {
      performance.measure("chart library and history", { start: t0 });
      drawCharts(P, hi, t, u);
    }, (e) => {
      const what = e instanceof GP.ApiError ? `the GPU history could not be read (${e.message})` : e.message;
      CHARTS.forEach((id) => placeholder(id, `Charts are unavailable: ${what}. The numbers below and the CSV export still work.`, "error"));
    });
  }

  function exportCsv() {
    // The last two columns split gpu_hours_allocated by how its busy time is known: measured,
    // or estimated (MPS shares); the chargeback CSV has the same two (gpu_hours_measured 4th,
    // gpu_hours_estimated last). Efficiency is empty where neither.
    const rows = [["group_by", "key", "from", "to", "gpu_hours_allocated", "gpu_hours_busy", "efficiency", "gpu_memory_mib_max",
      "gpu_hours_measured", "gpu_hours_estimated"]];
    for (const [g, list] of [["tenant", last.tenants], ["user", last.users]]) {
      for (const r of list) {
        const a = alloc(r), b = busy(r);
        rows.push([g, key(r), last.from, last.to, a.toFixed(4), b.toFixed(4), known(r) && a ? (b / a).toFixed(4) : "",
          r.gpu_memory_mib_max ?? "", hours(r.gpu_seconds_measured ?? r.gpu_seconds_allocated).toFixed(4), estimated(r).toFixed(4)]);
      }
    }
    GP.downloadCsv(`gpupool-usage-${last.from}-${last.to}.csv`, rows);
  }

  const chargeKnown = (r) => (r.gpu_hours_measured ?? 1) + (r.gpu_hours_estimated ?? 0) > 0;

  /** Chargeback (issue 35): the server's sums per tenant, user or model, and its CSV. */
  async function chargeback() {
    const by = document.getElementById("charge-by").value;
    document.getElementById("charge-key").textContent = { tenant: "Tenant", user: "User", model: "GPU model" }[by];
    const q = `by=${by}&from=${last.from}&to=${last.to}`;
    const rep = await GP.get(`/usage/chargeback?${q}`);
    const f = (x) => x.toFixed(2);
    const row = (r, cls) => h("tr", cls ? { class: cls } : {}, h("td", {}, r.key),
      h("td", { class: "num" }, f(r.gpu_hours_allocated)),
      busyCell(f(r.gpu_hours_busy), chargeKnown(r), r.gpu_hours_estimated ?? 0),
      h("td", { class: "num" }, f(r.gpu_memory_gib_hours)),
      h("td", { class: "num" }, r.energy_kwh === null ? "n/a" : f(r.energy_kwh)),
      h("td", { class: "num" }, String(r.workloads)));
    const rows = rep.rows.map((r) => row(r));
    if (rep.rows.length) rows.push(row(rep.total, "total"));
    GP.fillTable("chargeback", rows, "No usage recorded in this range.");
    showNote("charge-estimated", rep.total.gpu_hours_estimated > 0 || !rep.rows.every(chargeKnown));
    return q;
  }

  async function chargebackCsv() {
    const q = await chargeback();
    const text = await GP.get(`/usage/chargeback?${q}&format=csv`);
    const by = document.getElementById("charge-by").value;
    GP.downloadCsvText(`gpupool-chargeback-${by}-${last.from}-${last.to}.csv`, text);
  }

  GP.ready.then((u) => {
    if (!u) return;
    CHARTS.forEach((id) => placeholder(id, "Loading chart…"));
    if (localStorage.getItem(SEEN_KEY)) loadPlotly().catch(() => {});
    let stop = GP.poll(refresh, REFRESH_MS);
    document.querySelectorAll("button.range").forEach((b) => b.addEventListener("click", () => {
      rangeS = Number(b.dataset.range);
      document.querySelectorAll("button.range").forEach((o) => o.setAttribute("aria-pressed", String(o === b)));
      stop();
      stop = GP.poll(refresh, REFRESH_MS);
    }));
    document.getElementById("export-csv").addEventListener("click", exportCsv);
    document.getElementById("charge-by").addEventListener("change", () => chargeback().catch(() => {}));
    document.getElementById("charge-csv").addEventListener("click", () => chargebackCsv().catch((e) => GP.flash(e.message)));
  });
})();
