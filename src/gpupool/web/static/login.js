/* Login page: POST /auth/login, keep the token in this tab's sessionStorage, go back. */
"use strict";
(() => {
  const form = document.getElementById("login-form");
  const params = new URLSearchParams(location.search);
  // Only this dashboard's own pages are allowed as a return target (no open redirect).
  const next = params.get("next") || "";
  const target = (next === GP.BASE || next.startsWith(`${GP.BASE}/`)) && !next.includes("//") ? next : `${GP.BASE}/cluster`;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const username = form.username.value.trim();
    const password = form.password.value;
    if (!username || !password) {
      GP.formError("login-error", "Enter your user name and password.");
      (username ? form.password : form.username).focus();
      return;
    }
    const btn = form.querySelector("button[type=submit]");
    btn.disabled = true;
    try {
      const res = await GP.api("POST", "/auth/login", { username, password }, { noRedirect: true });
      const tok = res.token || res.access_token;
      GP.setSession(tok, res.user || null);
      location.assign(target);
    } catch (e) {
      const msg = e.status === 401 || e.status === 403
        ? "Wrong user name or password (or the account is disabled). Try again."
        : e.message;
      GP.formError("login-error", msg);
      form.password.select();
    } finally {
      btn.disabled = false;
    }
  });
})();
