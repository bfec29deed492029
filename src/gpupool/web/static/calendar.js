/* Reservations calendar (tenants page, issue 35): the reservations the API lets this user see,
 * as bars on a UTC time axis, one row per GPU model (overlapping windows stack in lanes).
 * Plain positioned HTML; no library. GP.calendar(reservations) (re)draws it. */
"use strict";
(() => {
  const { h } = GP;
  const DAY = 86400;
  const SPANS = { 1: "Day", 7: "Week", 14: "14 days" };
  let spanDays = 14;
  let shift = 0; // in spans, from the view that begins today (UTC)
  let last = [];

  const el = () => document.getElementById("res-calendar");
  const dayStart = (t) => Math.floor(t / DAY) * DAY;
  const day = (t) => new Date(t * 1000).toISOString().slice(5, 10);
  const hour = (t) => new Date(t * 1000).toISOString().slice(11, 16);
  const pct = (x) => `${(x * 100).toFixed(4)}%`;

  /** Greedy lanes: each reservation (by start) goes in the first lane free at its start. */
  function lanes(rs) {
    const ends = [];
    return rs.map((r) => {
      let i = ends.findIndex((e) => e <= r.start);
      if (i < 0) { i = ends.length; ends.push(0); }
      ends[i] = r.end;
      return i;
    });
  }

  function ticks(from, to) {
    const step = spanDays === 1 ? 3 * 3600 : DAY;
    const out = [];
    for (let t = from; t < to; t += step) {
      out.push(h("span", { class: "cal-tick", style: `left:${pct((t - from) / (to - from))}` },
        spanDays === 1 ? hour(t) : day(t)));
    }
    return out;
  }

  function bar(r, lane, from, to, now) {
    const a = Math.max(r.start, from);
    const b = Math.min(r.end, to);
    const who = r.users.length ? `${r.tenant} (${r.users.join(", ")})` : r.tenant;
    const gpus = `${r.gpus} GPU${r.gpus === 1 ? "" : "s"}`;
    const full = `${r.name || r.id}: ${who}, ${gpus}${r.model ? " " + r.model : ""}, ${GP.when(r.start)} to ${GP.when(r.end)} (${r.state})`;
    return h("div", {
      class: `cal-bar ${r.end <= now ? "past" : r.start <= now ? "active" : ""}`,
      style: `left:${pct((a - from) / (to - from))};width:${pct((b - a) / (to - from))};top:${lane * 1.9 + 0.2}em`,
      title: full, role: "listitem", "aria-label": full, dataset: { id: r.id },
    }, `${r.tenant} · ${gpus}`);
  }

  /** The "now" line, drawn in every track that the range covers. */
  const nowMark = (now, from, to) => (now >= from && now < to
    ? h("div", { class: "cal-now", style: `left:${pct((now - from) / (to - from))}`, title: `now: ${GP.when(now)}` }) : null);

  function draw() {
    const box = el();
    if (!box) return;
    const now = Date.now() / 1000;
    const from = dayStart(now) + shift * spanDays * DAY;
    const to = from + spanDays * DAY;
    document.getElementById("cal-range").textContent = `${GP.when(from).slice(0, 16)} to ${GP.when(to).slice(0, 16)} UTC`;
    const shown = last.filter((r) => r.end > from && r.start < to).sort((x, y) => x.start - y.start);
    const models = [...new Set(shown.map((r) => r.model || ""))].sort((x, y) => (!x) - (!y) || x.localeCompare(y));
    const rows = models.map((m) => {
      const rs = shown.filter((r) => (r.model || "") === m);
      const ln = lanes(rs);
      const height = (Math.max(...ln) + 1) * 1.9 + 0.4;
      return h("div", { class: "cal-row", role: "listitem", dataset: { model: m } },
        h("div", { class: "cal-label" }, m || "any model"),
        h("div", { class: "cal-track", style: `height:${height}em`, role: "list", "aria-label": `Reservations of ${m || "any model"}` },
          rs.map((r, i) => bar(r, ln[i], from, to, now)), nowMark(now, from, to)));
    });
    box.dataset.from = String(from);
    box.dataset.to = String(to);
    box.replaceChildren(
      h("div", { class: "cal-row cal-axis", "aria-hidden": "true" }, h("div", { class: "cal-label" }),
        h("div", { class: "cal-track cal-ticks" }, ticks(from, to), nowMark(now, from, to))),
      rows.length ? h("div", { role: "list", "aria-label": "GPU models" }, rows)
        : h("p", { class: "muted cal-empty" }, "No reservations in this range."));
  }

  function controls() {
    const ctl = document.getElementById("cal-controls");
    const span = h("select", { id: "cal-span", "aria-label": "Calendar span", onchange: (e) => { spanDays = +e.target.value; shift = 0; draw(); } },
      Object.entries(SPANS).map(([d, name]) => h("option", { value: d, selected: +d === spanDays }, name)));
    const move = (d) => () => { shift = d === 0 ? 0 : shift + d; draw(); };
    ctl.replaceChildren(span,
      h("button", { type: "button", class: "secondary", onclick: move(-1) }, "Earlier"),
      h("button", { type: "button", class: "secondary", onclick: move(0) }, "Today"),
      h("button", { type: "button", class: "secondary", onclick: move(1) }, "Later"));
  }

  /** Draw `reservations` (the API's list, past ones included). */
  GP.calendar = (reservations) => {
    if (!document.getElementById("cal-span")) controls();
    last = reservations;
    draw();
  };
})();
