/* gpupool dashboard: shared helpers. Every page script uses window.GP.
 *
 * Auth: the login page stores the API bearer token in this tab's sessionStorage (closing the
 * tab forgets it). Every call goes to the REST API with that token; the API's role rules
 * decide what comes back. Without one (signed in through JupyterHub, or a new tab), calls
 * ride on the session cookie, and those that change state send the session's CSRF token
 * (GET /auth/csrf) in the X-CSRF-Token header. A 401 sends the user to the login page.
 * DOM is built with textContent only, never innerHTML, so API data cannot inject markup.
 */
"use strict";

const GP = (() => {
  const body = document.body;
  const API = body.dataset.api || "/api/v1";
  const BASE = body.dataset.base || "/dashboard";
  const TOKEN_KEY = "gpupool.token";
  const ME_KEY = "gpupool.me";

  class ApiError extends Error {
    constructor(status, message, problem) {
      super(message);
      this.status = status;
      this.problem = problem || {};
    }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY);
  const SAFE = new Set(["GET", "HEAD", "OPTIONS"]);
  let csrf = null; // this page's copy of the cookie session's CSRF token

  /** The CSRF token of the cookie session (asked once per page, again after a refusal). */
  async function csrfToken(fresh = false) {
    if (!csrf || fresh) csrf = (await api("GET", "/auth/csrf")).token;
    return csrf;
  }
  const me = () => {
    try { return JSON.parse(sessionStorage.getItem(ME_KEY) || "null"); } catch { return null; }
  };

  function setSession(tok, user) {
    sessionStorage.setItem(TOKEN_KEY, tok);
    sessionStorage.setItem(ME_KEY, JSON.stringify(user || null));
  }

  function clearSession() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(ME_KEY);
  }

  function toLogin() {
    const next = location.pathname + location.search;
    location.assign(`${BASE}/login?next=${encodeURIComponent(next)}`);
  }

  /** A readable sentence from an API error body (problem+json or FastAPI's detail). */
  function problemMessage(status, p) {
    if (p && typeof p === "object") {
      if (typeof p.detail === "string" && p.detail) return p.detail;
      if (Array.isArray(p.detail) && p.detail.length) {
        return p.detail.map((d) => `${(d.loc || []).filter((x) => x !== "body").join(".")}: ${d.msg}`).join("; ");
      }
      if (Array.isArray(p.errors) && p.errors.length) {
        return p.errors.map((d) => (d.field ? `${d.field}: ` : "") + (d.message || d.msg || "")).join("; ");
      }
      if (p.title) return p.title;
    }
    if (status === 403) return "Your role does not allow this.";
    return `The server answered ${status}.`;
  }

  /** Call the API. Resolves to parsed JSON (or text); rejects with ApiError. */
  async function api(method, path, data, opts = {}) {
    const headers = { Accept: "application/json, application/problem+json, text/plain" };
    const tok = token();
    if (tok) headers.Authorization = `Bearer ${tok}`;
    else if (!SAFE.has(method) && path !== "/auth/login") {
      headers["X-CSRF-Token"] = await csrfToken(opts.freshCsrf);
    }
    let bodyText;
    if (data !== undefined) {
      headers["Content-Type"] = "application/json";
      bodyText = JSON.stringify(data);
    }
    let r;
    try {
      r = await fetch(API + path, { method, headers, body: bodyText, cache: "no-store" });
    } catch (e) {
      throw new ApiError(0, "Cannot reach the gpupool server; check that it is running.");
    }
    const ct = r.headers.get("content-type") || "";
    const parsed = ct.includes("json") ? await r.json().catch(() => null) : await r.text();
    if (r.status === 401 && !opts.noRedirect) {
      clearSession();
      toLogin();
      throw new ApiError(401, "Your session has ended; log in again.");
    }
    if (r.status === 403 && headers["X-CSRF-Token"] && !opts.freshCsrf
        && String((parsed && parsed.detail) || "").includes("X-CSRF-Token")) {
      return api(method, path, data, { ...opts, freshCsrf: true }); // the session changed
    }
    if (!r.ok) {
      const p = parsed && typeof parsed === "object" ? parsed : {};
      throw new ApiError(r.status, problemMessage(r.status, p), p);
    }
    return parsed;
  }
  const get = (path) => api("GET", path);

  /** h("td", {class: "num"}, "3") — an element with attributes and text/element children. */
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat()) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  /** Replace a table body's rows; `empty` is shown when there are none. */
  function fillTable(table, rows, empty, cols) {
    const tb = (typeof table === "string" ? document.getElementById(table) : table).tBodies[0];
    const n = cols || tb.parentElement.tHead.rows[0].cells.length;
    tb.replaceChildren(...(rows.length ? rows : [h("tr", { class: "empty" }, h("td", { colspan: n }, empty))]));
  }

  const flashEl = () => document.getElementById("flash");
  let flashTimer;
  /** A page-level message in the alert region. kind: "error" (default) or "ok". */
  function flash(message, kind = "error") {
    const el = flashEl();
    if (!el) return;
    el.textContent = message;
    el.classList.toggle("ok", kind === "ok");
    el.hidden = false;
    clearTimeout(flashTimer);
    if (kind === "ok") flashTimer = setTimeout(() => { el.hidden = true; }, 6000);
  }
  function clearFlash() { const el = flashEl(); if (el) el.hidden = true; }

  /** Message for a failed action, saying plainly when the role forbids it. */
  function actionError(what, err) {
    if (err.status === 403) return `Not allowed: you cannot ${what}. ${err.message}`;
    return `Could not ${what}: ${err.message}`;
  }

  /** Show an error inside a form's alert element (or hide it when msg is empty). */
  function formError(id, msg) {
    const el = document.getElementById(id);
    if (!el) return flash(msg);
    el.textContent = msg || "";
    el.hidden = !msg;
  }

  /** Mark one input invalid with a message next to it; empty msg clears it. */
  function fieldError(inputId, msg) {
    const input = document.getElementById(inputId);
    const err = document.getElementById(`${inputId}-err`);
    if (input) input.setAttribute("aria-invalid", msg ? "true" : "false");
    if (err) err.textContent = msg || "";
  }

  /** Run `fn` now and every `ms` while the tab is visible; returns a function that stops it. */
  function poll(fn, ms) {
    let timer = null;
    let stopped = false;
    let failing = null; // the message this poller put up, cleared once it works again
    const tick = async () => {
      timer = null;
      if (stopped) return;
      if (!document.hidden) {
        try {
          await fn();
          const el = flashEl();
          if (failing && el && el.textContent === failing) clearFlash();
          failing = null;
        } catch (e) {
          if (e.status !== 401) {
            failing = e.status === 403 ? actionError("see this page", e) : `Live update failed: ${e.message}`;
            flash(failing);
          }
        }
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && timer !== null) { clearTimeout(timer); tick(); }
    });
    tick();
    return () => { stopped = true; if (timer) clearTimeout(timer); };
  }

  // Times are 24-hour UTC everywhere, as the server's messages and the CLI write them.
  const utc = (d) => d.toISOString().replace("T", " ").slice(0, 19);

  function stamp() {
    const t = document.getElementById("updated");
    if (t) { const d = new Date(); t.dateTime = d.toISOString(); t.textContent = `${utc(d).slice(11)} UTC`; }
  }

  // --- formatting ---
  const gpus = (milli) => (milli === null || milli === undefined ? "—" : `${+(milli / 1000).toFixed(3)}`);
  const gib = (mib) => (mib === null || mib === undefined ? "—" : `${+(mib / 1024).toFixed(1)} GiB`);
  const pct = (x) => (x === null || x === undefined ? "—" : `${Math.round(x)}%`);
  function duration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "—";
    s = Math.max(0, s);
    if (s < 60) return `${Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }
  /** "2026-11-28 14:05:09 UTC" from epoch seconds. */
  const when = (t) => (t ? `${utc(new Date(t * 1000))} UTC` : "—");

  /** A request in a table's few columns, as the CLI's ASKS column writes it: "2 GPUs",
   * "0.25 GPU, 20G", "2x8 H100 GPUs", "MIG 1g.10gb", "CPU only". */
  function asks(r) {
    if (!r) return "—";
    const model = r.gpu_model ? `${r.gpu_model} ` : "";
    if ((r.nodes || 1) > 1) return `${r.nodes}x${r.gpus_per_node} ${model}GPUs`;
    if (r.mig) return `MIG ${r.mig}${r.gpu_model ? ` ${r.gpu_model}` : ""}`;
    if (r.gpus) return `${r.gpus} ${model}GPU${r.gpus > 1 ? "s" : ""}`;
    const frac = r.gpu_fraction ?? (r.gpu_milli ? r.gpu_milli / 1000 : 0);
    if (frac) return `${+frac.toFixed(3)} ${model}GPU${r.gpu_memory_mib ? `, ${+(r.gpu_memory_mib / 1024).toFixed(1)}G` : ""}`;
    return "CPU only";
  }

  /** "2 GPUs", "0.25 GPU, 20 GiB", "CPU only" from an API request object; its placement
   * pins after it: "1 GPU on slurm, zone=a". */
  function describeRequest(req) {
    if (!req) return "—";
    const labels = Object.entries(req.node_labels || {}).map(([k, v]) => `${k}=${v}`);
    const pins = [req.engine, ...labels].filter(Boolean);
    const on = pins.length ? ` on ${pins.join(", ")}` : "";
    if (req.description) return req.description + (req.gpu_fraction && req.gpu_memory_mib && !/GiB/.test(req.description) ? `, ${gib(req.gpu_memory_mib)}` : "") + on;
    const model = req.gpu_model ? ` ${req.gpu_model}` : "";
    if (req.gpus) return `${req.gpus}${model} GPU${req.gpus > 1 ? "s" : ""}`;
    const frac = req.gpu_fraction ?? (req.gpu_milli ? req.gpu_milli / 1000 : 0);
    if (frac) {
      const mem = req.gpu_memory_mib ? `, ${gib(req.gpu_memory_mib)}` : "";
      return `${+frac.toFixed(3)} of a${model} GPU${mem}`;
    }
    return "CPU only";
  }

  const badge = (text, cls) => h("span", { class: `badge ${cls || ""}` }, text);

  /** Parse a number field: "" → null (when allowed), else a finite number ≥ min or an error. */
  function numberField(id, { optional = false, min = 0, integer = false, label } = {}) {
    const input = document.getElementById(id);
    const raw = input.value.trim();
    const name = label || input.labels?.[0]?.textContent.trim() || id;
    if (raw === "") {
      if (optional) return { value: null };
      return { error: `${name}: enter a number.` };
    }
    const v = Number(raw);
    if (!isFinite(v)) return { error: `${name}: "${raw}" is not a number.` };
    if (integer && !Number.isInteger(v)) return { error: `${name}: enter a whole number.` };
    if (v < min) return { error: `${name}: must be at least ${min}.` };
    return { value: v };
  }

  function isAdmin(u = me()) { return !!(u && (u.admin || u.role === "admin")); }
  /** The user's tenant roles as {tenant: role}. */
  function roles(u = me()) {
    const out = {};
    for (const m of (u && u.memberships) || []) out[m.tenant] = m.role;
    return out;
  }
  /** True if the user may change `tenant`'s quota: admins, and tenant-admins of an ancestor
   * (the API's rule; a tenant-admin cannot raise its own tenant's quota). */
  function canAdminTenant(tenant, u = me()) {
    if (isAdmin(u)) return true;
    return Object.entries(roles(u)).some(([t, r]) => r === "tenant-admin" && tenant.startsWith(`${t}/`));
  }
  function canSubmit(u = me()) {
    return isAdmin(u) || Object.values(roles(u)).some((r) => r === "member" || r === "tenant-admin");
  }

  /** One CSV cell that a spreadsheet reads as data: text that would start a formula (= + - @,
   * tab, CR: user, tenant and GPU model names are others' text) gets a leading ' (OWASP's
   * rule, as gpupool.api.csvtext on the server); numbers stay numbers; quotes, commas and
   * line breaks are quoted. */
  function csvCell(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") return String(v);
    let s = String(v);
    if (/^[=+\-@\t\r]/.test(s)) s = `'${s}`;
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  }

  /** CSV text of `rows` (arrays of cells), one line each. */
  function csvText(rows) {
    return rows.map((r) => r.map(csvCell).join(",")).join("\n") + "\n";
  }

  /** Save `text` (CSV already: neutralised by csvText or by the server) as `filename`. */
  function downloadCsvText(filename, text) {
    const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    const a = h("a", { href: url, download: filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  function downloadCsv(filename, rows) {
    downloadCsvText(filename, csvText(rows));
  }

  /** Run `fn` when the browser is idle (or after 2 s at the latest). */
  function whenIdle(fn) {
    if (window.requestIdleCallback) requestIdleCallback(fn, { timeout: 2000 });
    else setTimeout(fn, 500);
  }

  /** Header: who is logged in, admin-only links, logout. Pages other than login need a token
   * or a cookie session (JupyterHub sign-on). */
  async function initShell() {
    if (body.dataset.page && !token()) {
      try {
        const u = await api("GET", "/auth/me", undefined, { noRedirect: true });
        sessionStorage.setItem(ME_KEY, JSON.stringify(u));
      } catch (e) { clearSession(); toLogin(); return null; }
    }
    const logout = document.getElementById("logout");
    if (logout) {
      logout.addEventListener("click", async () => {
        // A cookie session ends on the server too (the cookie is HttpOnly).
        if (!token()) await api("POST", "/auth/logout", undefined, { noRedirect: true }).catch(() => {});
        clearSession();
        location.assign(`${BASE}/login`);
      });
    }
    // Who am I: the copy kept at login lets the page start its data calls at once; a fresh
    // copy is fetched alongside (roles may have changed) and awaited only when none is kept.
    let u = me();
    if (body.dataset.page) {
      const refresh = () => api("GET", "/auth/me").then((x) => {
        sessionStorage.setItem(ME_KEY, JSON.stringify(x));
        return x;
      });
      if (!u) {
        try { u = await refresh(); } catch (e) { return null; }
      } else {
        // Refresh once the page's own data calls are done (roles may have changed).
        whenIdle(() => refresh().catch(() => {}));
      }
    }
    const who = document.getElementById("whoami");
    if (who && u) {
      const rs = isAdmin(u) ? "admin" : [...new Set(Object.values(roles(u)))].join(", ") || "no tenant";
      who.textContent = `${u.name} (${rs})`;
    }
    if (isAdmin(u)) document.querySelectorAll(".admin-only").forEach((e) => { e.hidden = false; });
    return u;
  }

  const ready = new Promise((resolve) => {
    const go = () => initShell().then(resolve, () => resolve(null));
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
    else go();
  });

  return {
    API, BASE, ApiError, api, get, h, fillTable, flash, clearFlash, actionError, formError,
    fieldError, poll, stamp, gpus, gib, pct, duration, when, asks, describeRequest, badge, numberField,
    isAdmin, roles, canAdminTenant, canSubmit, csvText, downloadCsv, downloadCsvText, me, setSession, clearSession, ready,
    token, whenIdle,
  };
})();
window.GP = GP;
