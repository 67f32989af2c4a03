// jobhost operator console: plain ES2020, no build step, no framework.
//
// Hash routes: #/ (overview), #/jobs, #/jobs/NAME, #/runs?filters, #/runs/ID, #/upcoming,
// #/reports, #/hosts, #/tenants, #/tokens, #/audit.
// Each view builds its skeleton once (controls the operator types into stay put) and
// registers a `load` that fetches and fills its data regions; live updates from /stream
// call that `load` again. Server text is only ever inserted with textContent (logs and
// errors come from untrusted guests).
"use strict";

(function () {
  // ---------------------------------------------------------------- DOM helpers

  const PROPS = new Set(["value", "checked", "disabled", "hidden", "selected", "indeterminate", "open"]);

  function h(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    const props = [];
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
      else if (PROPS.has(k)) props.push([k, v]);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    add(node, kids);
    for (const [k, v] of props) node[k] = v;
    return node;
  }

  function add(node, kids) {
    for (const c of kids.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }

  // Replaces a node's children; null, false and nested arrays are fine.
  function fill(node, ...kids) {
    node.replaceChildren();
    return add(node, kids);
  }

  const $ = (sel, root) => (root || document).querySelector(sel);
  const main = () => document.getElementById("main");
  const dash = "—";
  const isNil = (v) => v === null || v === undefined || v === "";

  // ---------------------------------------------------------------- formatting

  function ago(t) {
    const ms = Date.parse(t);
    if (isNaN(ms)) return dash;
    const d = Date.now() - ms;
    const a = Math.abs(d);
    let s;
    if (a < 5e3) return d >= 0 ? "just now" : "now";
    if (a < 60e3) s = Math.round(a / 1e3) + "s";
    else if (a < 3600e3) s = Math.round(a / 60e3) + "m";
    else if (a < 86400e3) s = Math.round(a / 3600e3) + "h";
    else s = Math.round(a / 86400e3) + "d";
    return d >= 0 ? s + " ago" : "in " + s;
  }

  function absTime(t) {
    const d = new Date(t);
    return isNaN(d) ? String(t) : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
  }

  function when(t) {
    if (isNil(t)) return h("span", { class: "muted" }, dash);
    return h("time", { datetime: t, title: absTime(t) }, ago(t));
  }

  function whenAbs(t) {
    if (isNil(t)) return h("span", { class: "muted" }, dash);
    return h("time", { datetime: t, title: ago(t) }, absTime(t));
  }

  const dur = (v) => (isNil(v) ? dash : window.Charts.durationLabel(Number(v)));
  const num = (v) => (isNil(v) ? dash : Number(v).toLocaleString());

  function bytes(n) {
    if (isNil(n)) return dash;
    n = Number(n);
    if (n < 1024) return n + " B";
    if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
    if (n < 1 << 30) return (n / (1 << 20)).toFixed(1) + " MiB";
    return (n / (1 << 30)).toFixed(2) + " GiB";
  }

  function pct(x) {
    if (isNil(x)) return dash;
    const p = Number(x) * 100;
    return (p >= 99.95 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + "%";
  }

  function bucketName(ms) {
    if (!ms) return "bucket";
    if (ms % 86400e3 === 0) return ms === 86400e3 ? "day" : ms / 86400e3 + " days";
    if (ms % 3600e3 === 0) return ms === 3600e3 ? "hour" : ms / 3600e3 + " h";
    if (ms % 60e3 === 0) return ms === 60e3 ? "minute" : ms / 60e3 + " min";
    return ms / 1000 + " s";
  }

  function shortId(id) {
    const s = String(id == null ? "" : id);
    // Run ids are UUIDv7s: their head is a timestamp shared by runs made together, so a
    // short form keeps the head and the random tail.
    return s.length > 14 ? s.slice(0, 8) + "…" + s.slice(-4) : s;
  }

  function shortDigest(d) {
    const s = String(d == null ? "" : d);
    const i = s.indexOf(":");
    return (i >= 0 ? s.slice(i + 1) : s).slice(0, 12);
  }

  function json(v) {
    try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); }
  }

  const badge = (status) => h("span", { class: "badge", "data-status": status || "unknown" }, status || "unknown");
  const code = (c) => (isNil(c) ? "" : h("code", { class: "code" }, c));

  const runHref = (id) => "#/runs/" + encodeURIComponent(id);
  const jobHref = (name) => "#/jobs/" + encodeURIComponent(name);
  function runsHref(filter) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(filter || {})) if (!isNil(v)) q.set(k, v);
    const s = q.toString();
    return "#/runs" + (s ? "?" + s : "");
  }
  const runLink = (id, key) => (isNil(id) ? h("span", { class: "muted" }, dash) :
    h("a", { href: runHref(id), class: "mono", title: id, "data-key": key || "run:" + id }, shortId(id)));

  const STATUSES = ["queued", "running", "succeeded", "failed", "crashed", "cancelled", "skipped", "dropped"];
  const OUTCOME_COLORS = {
    succeeded: "var(--st-succeeded)", failed: "var(--st-failed)", crashed: "var(--st-crashed)",
    cancelled: "var(--st-cancelled)", skipped: "var(--st-skipped)", dropped: "var(--st-skipped)",
    running: "var(--st-running)", queued: "var(--st-queued)", waiting: "var(--st-queued)",
    claimed: "var(--st-queued)",
  };
  const colorOf = (s) => OUTCOME_COLORS[s] || "var(--muted)";
  const canCancel = (s) => s === "queued" || s === "waiting" || s === "claimed" || s === "running";
  const canRetry = (s) => s === "failed" || s === "crashed" || s === "cancelled";

  // ---------------------------------------------------------------- token and API

  const TOKEN_KEY = "jobhost-token";
  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, options) {
    const opts = options || {};
    const headers = { Authorization: "Bearer " + token(), Accept: "application/json" };
    // `raw`: a body already in JSON text, sent as typed (the host, not the browser, judges
    // a payload: JSON.parse would quietly drop a key given twice).
    const sent = opts.raw !== undefined ? opts.raw : opts.body === undefined ? undefined : JSON.stringify(opts.body);
    if (sent !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, { method: opts.method || "GET", headers, cache: "no-store", body: sent });
    } catch (_) {
      throw new ApiError(0, "network", "cannot reach the host");
    }
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : {}; } catch (_) { body = null; }
    if (response.status === 401) signOut("the token was refused: sign in again");
    if (!response.ok) {
      const e = (body && body.error) || {};
      throw new ApiError(response.status, e.code || "http_" + response.status,
        e.message || e.code || `${response.status} ${response.statusText || "error"}`);
    }
    if (body === null) throw new ApiError(response.status, "bad_json", "the host answered something that is not JSON");
    return body;
  }

  function describe(e, path) {
    const where = path ? path.split("?")[0] + ": " : "";
    return where + (e && e.message ? e.message : String(e));
  }

  // A GET that records its failure instead of throwing, so one missing endpoint leaves the
  // rest of a view working.
  async function tryGet(errs, path) {
    try {
      return await api(path);
    } catch (e) {
      if (errs) errs.push(describe(e, path));
      return null;
    }
  }

  // ---------------------------------------------------------------- messages

  let actionError = { text: "", at: 0 };
  let loadErrors = [];

  function renderErrors() {
    const parts = [...loadErrors];
    if (actionError.text && Date.now() - actionError.at < 10e3) parts.unshift(actionError.text);
    document.getElementById("error").textContent = parts.join(" · ");
  }

  function fail(e, what) {
    actionError = { text: (what ? what + ": " : "") + (e && e.message ? e.message : String(e)), at: Date.now() };
    renderErrors();
  }

  let noticeTimer = null;
  function notice(text) {
    const n = document.getElementById("notice");
    n.textContent = text;
    clearTimeout(noticeTimer);
    if (text) noticeTimer = setTimeout(() => { n.textContent = ""; }, 8000);
  }

  // ---------------------------------------------------------------- confirm dialog

  // A native modal <dialog>: the rest of the page is inert while it is open (focus stays
  // inside) and Escape closes it (answering "no").
  function confirmDialog({ title, body, yes, danger }) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-body").replaceChildren(...[].concat(body));
    const ok = document.getElementById("confirm-yes");
    ok.textContent = yes || "Confirm";
    ok.className = danger === false ? "primary" : "danger";
    ok.disabled = false;
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.showModal();
      // Focus starts on "Go back": Enter alone never does something destructive.
      document.getElementById("confirm-no").focus();
    });
  }

  function disableConfirm() {
    document.getElementById("confirm-yes").disabled = true;
    document.getElementById("confirm-no").focus();
  }

  // ---------------------------------------------------------------- who signed in

  // What the token is (GET /whoami, asked once per sign-in): a read-only token is shown no
  // control that changes anything; a tenant's token has no tokens view.
  let me = null;

  async function loadMe(errs) {
    if (me) return;
    try {
      me = await api("/whoami");
    } catch (e) {
      if (errs) errs.push(describe(e, "/whoami"));
    }
    for (const view of ["tokens", "hosts", "tenants"]) {
      const nav = document.querySelector(`[data-nav="${view}"]`);
      if (nav) nav.hidden = !isOperator();
    }
  }

  const readOnly = () => !me || me.kind === "read_only";
  const isOperator = () => !!me && me.kind !== "tenant";
  // A control that changes something: none for a read-only token.
  const changes = (node) => (readOnly() ? null : node);

  // ---------------------------------------------------------------- pauses (operator only)

  // null: not known yet; false: /pauses answered 404 (a tenant's token, or an older host):
  // pause buttons are hidden.
  let canPause = null;
  let pauses = [];

  async function loadPauses(errs) {
    // Asked once per sign-in: a token that may not pause is not asked again on each view.
    if (canPause === false) return;
    try {
      const body = await api("/pauses");
      canPause = true;
      pauses = Array.isArray(body.pauses) ? body.pauses : [];
    } catch (e) {
      if (e.status === 404 || e.status === 403) { canPause = false; pauses = []; }
      else if (errs) errs.push(describe(e, "/pauses"));
    }
  }

  async function setPause(scope, name, paused) {
    const path = `/pauses/${encodeURIComponent(scope)}/${encodeURIComponent(name)}`;
    try {
      await api(path, { method: paused ? "POST" : "DELETE" });
      notice(`${paused ? "paused" : "resumed"} ${scope} ${name}`);
      refreshSoon(0);
    } catch (e) {
      fail(e, `${paused ? "pause" : "resume"} ${scope} ${name}`);
    }
  }

  function pauseButton(scope, name, paused, label) {
    if (!canPause || readOnly()) return null;
    const full = `${paused ? "Resume" : "Pause"} ${scope} ${name}`;
    return h("button", {
      type: "button", class: "btn-sm" + (paused ? " resume" : ""), "data-key": `pause:${scope}:${name}`,
      title: full, "aria-label": full,
      onclick: () => setPause(scope, name, !paused),
    }, label || (paused ? "Resume" : "Pause"));
  }

  // The pause/resume controls of a job: Pause the job, or Resume each pause that applies.
  function jobPauseControls(job) {
    if (!canPause || readOnly()) return [];
    if (!job.paused) return [pauseButton("job", job.name, false)];
    const applied = Array.isArray(job.pauses) && job.pauses.length ? job.pauses : [{ scope: "job", name: job.name }];
    return applied.map((p) => pauseButton(p.scope, p.name, true,
      p.scope === "job" || applied.length === 1 ? "Resume" : `Resume ${p.scope}`));
  }

  function pausedTag(job) {
    if (!job.paused) return h("span", { class: "muted" }, "no");
    const why = (job.pauses || []).map((p) => `${p.scope} ${p.name}`).join(", ");
    return h("span", { class: "tag tag-paused", title: why ? "paused by " + why : "paused" },
      "paused", why && !(job.pauses.length === 1 && job.pauses[0].scope === "job") ? " · " + why : "");
  }

  // ---------------------------------------------------------------- actions

  async function kick(name) {
    try {
      const r = await api(`/jobs/${encodeURIComponent(name)}/kick`, { method: "POST" });
      const what = r.result || "kicked";
      notice(`kicked ${name}: ${what}${r.run_id ? " (" + shortId(r.run_id) + ")" : ""}`);
      refreshSoon(300);
    } catch (e) {
      fail(e, "kick " + name);
    }
  }

  async function cancelRun(id) {
    const ok = await confirmDialog({
      title: "Cancel this run?",
      body: [h("p", {}, "Run ", h("code", {}, id), " will be cancelled. A running attempt is stopped; its work so far is kept in its log.")],
      yes: "Cancel run",
    });
    if (!ok) return;
    try {
      await api(`/runs/${encodeURIComponent(id)}/cancel`, { method: "POST" });
      notice("cancelled run " + shortId(id));
    } catch (e) {
      fail(e, "cancel");
    }
    refreshSoon(0);
  }

  async function retryRun(id) {
    try {
      const r = await api(`/runs/${encodeURIComponent(id)}/retry`, { method: "POST" });
      const next = r.run && r.run.run_id;
      notice(r.already ? `already retried as ${shortId(next)}` : `retried as ${shortId(next)}`);
      if (next) location.hash = runHref(next);
      else refreshSoon(0);
    } catch (e) {
      fail(e, "retry");
    }
  }

  function filterText(filter) {
    const parts = Object.entries(filter).map(([k, v]) => `${k} = ${v}`);
    return parts.length ? parts.join(", ") : "no filter: every run";
  }

  // What each action by filter is called, and what its preview says it touches.
  const BULK = {
    cancel: { verb: "Cancel", doing: "cancelling", done: "cancelled", note: "Only queued and running runs are cancelled; the count is of those." },
    retry: { verb: "Retry", doing: "retrying", done: "retried", note: "Only failed, crashed and cancelled runs are retried, each once; the count is of those." },
    purge: { verb: "Purge", doing: "purging", done: "purged", note: "Only ended runs whose endings were delivered are deleted, with their attempts, logs, journals and steps; the count is of those. This cannot be undone." },
  };

  // Bulk by filter: preview the count, confirm, then repeat the confirmed call while the
  // host says there is more (it does at most 1 000 runs per call).
  async function bulkByFilter(action, filter) {
    const { verb, doing, done: doneWord, note } = BULK[action];
    let preview;
    try {
      preview = await api(`/runs/${action}`, { method: "POST", body: { filter, confirm: false } });
    } catch (e) {
      fail(e, `${action} preview`);
      return;
    }
    const count = Number(preview.count) || 0;
    const countText = (preview.capped ? "over " : "") + count.toLocaleString();
    const body = [
      h("p", {}, `${verb} `, h("strong", { id: "confirm-count", "data-count": count }, countText),
        count === 1 ? " run" : " runs", " matching:"),
      h("p", { class: "filter-text mono" }, filterText(filter)),
      h("p", { class: "muted" }, note),
    ];
    const waiting = confirmDialog({ title: `${verb} all matching runs?`, body, yes: `${verb} ${countText}` });
    if (count === 0) disableConfirm();
    if (!(await waiting)) return;
    let done = 0;
    try {
      for (let round = 0; round < 10000; round++) {
        notice(`${doing}… ${done.toLocaleString()} so far`);
        const r = await api(`/runs/${action}`, { method: "POST", body: { filter, confirm: true } });
        done += Number(r.done) || 0;
        if (!r.more) break;
      }
      notice(`${doneWord} ${done.toLocaleString()} runs`);
    } catch (e) {
      fail(e, `${action} (after ${done})`);
    }
    refreshSoon(0);
  }

  async function bulkSelected(action, ids) {
    const verb = action === "cancel" ? "Cancel" : "Retry";
    const ok = await confirmDialog({
      title: `${verb} ${ids.length} selected run${ids.length === 1 ? "" : "s"}?`,
      body: [h("p", {}, `${verb} `, h("strong", { id: "confirm-count", "data-count": ids.length }, String(ids.length)),
        " selected runs. Runs that cannot be ", action === "cancel" ? "cancelled (already ended)" : "retried (not failed, crashed or cancelled)",
        " are skipped.")],
      yes: `${verb} ${ids.length}`,
    });
    if (!ok) return;
    let done = 0;
    let skipped = 0;
    const errors = [];
    let i = 0;
    const worker = async () => {
      while (i < ids.length) {
        const id = ids[i++];
        try {
          await api(`/runs/${encodeURIComponent(id)}/${action}`, { method: "POST" });
          done++;
        } catch (e) {
          if (e.status === 409) skipped++;
          else errors.push(shortId(id) + ": " + e.message);
        }
      }
    };
    await Promise.all([worker(), worker(), worker()]);
    runsState.selected.clear();
    notice(`${action === "cancel" ? "cancelled" : "retried"} ${done}` + (skipped ? `, ${skipped} skipped` : ""));
    if (errors.length) fail(errors.slice(0, 3).join("; ") + (errors.length > 3 ? ` (+${errors.length - 3})` : ""), action);
    refreshSoon(0);
  }

  // ---------------------------------------------------------------- page pieces

  function section(title, opts, ...body) {
    const o = opts || {};
    return h("section", { class: "card" + (o.class ? " " + o.class : ""), id: o.id, "aria-labelledby": o.id ? o.id + "-h" : undefined },
      title === null ? null : h("header", { class: "card-head" },
        h("h2", { id: o.id ? o.id + "-h" : undefined }, title), o.sub ? h("span", { class: "card-sub" }, o.sub) : null,
        h("span", { class: "fill" }), o.tools || null),
      ...body);
  }

  function table(headers, rows, opts) {
    const o = opts || {};
    const thead = h("thead", {}, h("tr", {}, headers.map((x) =>
      typeof x === "string" ? h("th", { scope: "col" }, x) : x)));
    const tbody = h("tbody", {}, rows);
    if (!rows.length) {
      tbody.append(h("tr", { class: "empty" }, h("td", { colspan: headers.length }, o.empty || "nothing here")));
    }
    return h("div", { class: "table-wrap" }, h("table", { class: "grid" + (o.class ? " " + o.class : "") }, thead, tbody));
  }

  function segmented(label, options, current, onPick) {
    return h("div", { class: "seg", role: "group", "aria-label": label },
      options.map(([value, text]) => h("button", {
        type: "button", "aria-pressed": String(value === current), "data-key": "seg:" + label + ":" + value,
        onclick: () => onPick(value),
      }, text)));
  }

  function stat(label, value, sub, cls) {
    return h("div", { class: "stat" + (cls ? " " + cls : "") },
      h("div", { class: "stat-label" }, label),
      h("div", { class: "stat-value" }, value),
      sub ? h("div", { class: "stat-sub" }, sub) : null);
  }

  function meter(busy, total) {
    const m = h("div", { class: "meter", role: "presentation" }, h("span"));
    const frac = total > 0 ? Math.min(1, busy / total) : 0;
    m.firstChild.style.width = (frac * 100).toFixed(1) + "%";
    return m;
  }

  function dl(pairs) {
    return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function pageHead(title, opts) {
    const o = opts || {};
    return h("div", { class: "page-head" },
      o.crumbs ? h("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, o.crumbs) : null,
      h("div", { class: "page-title" }, h("h1", {}, title), o.badges || null, h("span", { class: "fill" }), o.tools || null));
  }

  // ---------------------------------------------------------------- routing

  let current = null;
  let generation = 0;

  function parseRoute() {
    let hash = location.hash.replace(/^#/, "");
    if (!hash.startsWith("/")) hash = "/";
    const q = hash.indexOf("?");
    const path = q >= 0 ? hash.slice(0, q) : hash;
    const params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : "");
    const parts = path.split("/").filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    if (!parts.length) return { view: "overview", params };
    if (parts[0] === "jobs") return parts.length > 1 ? { view: "job", name: parts.slice(1).join("/"), params } : { view: "jobs", params };
    if (parts[0] === "tokens" && parts.length === 1) return { view: "tokens", params };
    if (parts[0] === "audit" && parts.length === 1) return { view: "audit", params };
    if (parts[0] === "hosts" && parts.length === 1) return { view: "hosts", params };
    if (parts[0] === "tenants" && parts.length === 1) return { view: "tenants", params };
    if (parts[0] === "reports" && parts.length === 1) return { view: "reports", params };
    if (parts[0] === "upcoming" && parts.length === 1) return { view: "upcoming", params };
    if (parts[0] === "runs") return parts.length > 1 ? { view: "run", id: parts.slice(1).join("/"), params } : { view: "runs", params };
    return { view: "notfound", params };
  }

  async function route() {
    if (!token()) { signOut(); return; }
    const r = parseRoute();
    const my = ++generation;
    const ctx = { route: r, alive: () => my === generation, load: null, view: r.view };
    current = ctx;
    const m = main();
    m.removeAttribute("data-view");
    m.setAttribute("aria-busy", "true");
    const navView = r.view === "job" ? "jobs" : r.view === "run" ? "runs" : r.view;
    for (const a of document.querySelectorAll("[data-nav]")) {
      if (a.dataset.nav === navView) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    loadErrors = [];
    await loadMe(loadErrors);
    if (!ctx.alive()) return;
    const root = (VIEWS[r.view] || VIEWS.notfound)(ctx);
    await runLoad(ctx);
    if (!ctx.alive()) return;
    m.replaceChildren(root);
    m.removeAttribute("aria-busy");
    m.dataset.view = ctx.view;
    if (ctx.after) ctx.after();
    if (pendingFocus && pendingFocus.view === ctx.view) {
      const el = document.getElementById(pendingFocus.id);
      pendingFocus = null;
      if (el) el.focus();
    }
  }

  // Fetches the current view's data again, keeping focus on the control that had it.
  async function runLoad(ctx) {
    if (!ctx.load) return;
    const active = document.activeElement;
    const key = active && active.dataset ? active.dataset.key : null;
    const errs = [];
    try {
      await ctx.load(errs);
    } catch (e) {
      errs.push(describe(e));
      if (window.console) console.warn(e);
    }
    if (!ctx.alive()) return;
    loadErrors = errs;
    renderErrors();
    if (key && (!document.activeElement || document.activeElement === document.body)) {
      const again = main().querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  let refreshTimer = null;
  let lastRefresh = 0;

  // Re-fetch the current view at most once per 2 s (an explicit action asks sooner).
  function refreshSoon(delay) {
    if (refreshTimer) {
      if (delay === undefined) return;
      clearTimeout(refreshTimer);
    }
    const wait = delay !== undefined ? delay : Math.max(0, lastRefresh + 2000 - Date.now());
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      lastRefresh = Date.now();
      const ctx = current;
      if (!ctx || !main().dataset.view) return;
      if (document.getElementById("confirm").open) { refreshSoon(); return; }
      await runLoad(ctx);
    }, wait);
  }

  // ---------------------------------------------------------------- overview

  let ovWindow = "hour";

  function overviewView(ctx) {
    const stats = h("div", { class: "stats" });
    const outcomes = h("div", { class: "chart-box" });
    const lanes = h("div", { class: "lanes" });
    const failures = h("div");
    const pausesBox = h("div");
    const runsTitle = h("h2", { id: "ov-runs-h" }, "Runs finished");
    const runsCard = h("section", { class: "card span-2", "aria-labelledby": "ov-runs-h" },
      h("header", { class: "card-head" }, runsTitle, h("span", { class: "fill" }),
        segmented("Window", [["hour", "Last hour"], ["day", "Last day"]], ovWindow, (w) => {
          ovWindow = w;
          for (const b of runsCard.querySelectorAll(".seg button")) b.setAttribute("aria-pressed", String(b.dataset.key.endsWith(":" + w)));
          runLoad(ctx);
        })),
      outcomes);
    const failTitle = h("span", { class: "card-sub" });
    const pausesCard = section("Pauses", { id: "ov-pauses" }, pausesBox);
    const failuresCard = section("Failures", { id: "ov-failures", sub: failTitle }, failures);
    const root = h("div", { class: "view view-overview" },
      pageHead("Overview"),
      stats,
      h("div", { class: "cols" },
        runsCard,
        failuresCard,
        pausesCard,
        section("Lanes", { id: "ov-lanes", class: "span-2", sub: "queue depth, workers busy and lag" }, lanes)));

    ctx.load = async (errs) => {
      const [ov] = await Promise.all([tryGet(errs, "/overview?window=" + ovWindow), loadPauses(errs)]);
      if (!ctx.alive()) return;
      const o = ov || {};
      const keys = Array.isArray(o.outcomes) && o.outcomes.length ? o.outcomes : ["succeeded", "failed", "crashed", "cancelled", "skipped"];
      const buckets = Array.isArray(o.buckets) ? o.buckets : [];
      const lanesData = Array.isArray(o.lanes) ? o.lanes : [];
      const fails = Array.isArray(o.failures) ? o.failures : [];
      const ps = Array.isArray(o.pauses) ? o.pauses : pauses;
      const full = Array.isArray(o.queue_full) ? o.queue_full : [];
      const sum = (k) => buckets.reduce((s, b) => s + (Number(b[k]) || 0), 0);
      const finished = keys.reduce((s, k) => s + sum(k), 0);
      const bad = sum("failed") + sum("crashed");
      const workers = o.workers || {};
      // A tenant's token is told its own queue, not the fleet's workers, history or pauses
      // (the API sends `workers: null` and an empty history; /pauses answers 404).
      const fleet = !(ov && o.workers === null);
      const operator = canPause !== false;
      const depth = lanesData.reduce((s, l) => s + (Number(l.depth) || 0), 0);
      const lag = lanesData.reduce((s, l) => Math.max(s, Number(l.lag_ms) || 0), 0);
      const heldDepth = lanesData.reduce((s, l) => s + (Number(l.paused_depth) || 0), 0);
      const winText = ovWindow === "day" ? "last day" : "last hour";
      runsTitle.textContent = `Runs finished per ${bucketName(o.bucket_ms)}`;
      fill(stats,
        !fleet ? null : stat("Workers busy", ov ? `${num(workers.busy)} / ${num(workers.total)}` : dash, ov ? meter(Number(workers.busy) || 0, Number(workers.total) || 0) : null),
        stat("Finished", ov ? num(finished) : dash, winText),
        stat("Failed", ov ? num(bad) : dash, ov && finished ? pct(bad / finished) + " of finished" : winText, bad ? "stat-bad" : ""),
        stat("Queued", ov ? num(depth) : dash, `${lanesData.length} lane${lanesData.length === 1 ? "" : "s"}`),
        stat("Max lag", ov ? dur(lag) : dash, "oldest due run waiting, paused ones apart", lag > 60e3 ? "stat-warn" : ""),
        !heldDepth ? null : stat("Held by pauses", num(heldDepth), "due runs a pause holds (not lag)", "stat-warn"),
        !full.length ? null : stat("Queue full", num(full.length), full.map((f) => `${f.tenant} ${num(f.queued)}/${num(f.max_queued)}`).slice(0, 2).join(", ") + " — new runs refused", "stat-bad"),
        !operator ? null : stat("Paused", num(ps.length), ps.length ? ps.map((p) => `${p.scope} ${p.name}`).slice(0, 2).join(", ") : "nothing paused", ps.length ? "stat-warn" : ""));
      const colors = {};
      for (const k of keys) colors[k] = colorOf(k);
      window.Charts.stackedBars(outcomes, { buckets, keys, colors, bucketMs: o.bucket_ms, height: 190 });

      fill(lanes, (lanesData.length ? lanesData.map((l) => {
        const chart = h("div", { class: "chart-box" });
        const card = h("div", { class: "lane" + (l.paused ? " is-paused" : "") },
          h("div", { class: "lane-head" },
            h("strong", {}, l.lane || "default"),
            l.paused ? h("span", { class: "tag tag-paused" }, "paused") : null,
            h("span", { class: "fill" }),
            pauseButton("lane", l.lane, !!l.paused)),
          h("div", { class: "lane-figs" },
            !fleet ? null : h("span", { class: "lane-fig", title: "workers busy / workers" }, h("b", {}, `${num(l.busy)}/${num(l.workers)}`), " busy"),
            !fleet ? null : meter(Number(l.busy) || 0, Number(l.workers) || 0),
            h("span", { class: "lane-fig", title: "queued runs that are due" }, h("b", {}, num(l.depth)), " queued"),
            h("span", { class: "lane-fig", title: "how long the oldest due run has waited (paused ones apart)", "data-lag": l.lane }, h("b", {}, dur(l.lag_ms)), " lag"),
            Number(l.paused_depth) ? h("span", { class: "lane-fig", title: "due runs a pause holds, and how long the oldest has waited", "data-paused": l.lane },
              h("b", {}, num(l.paused_depth)), " paused · ", dur(l.paused_lag_ms)) : null),
          fleet ? chart : null);
        return card;
      }) : [h("p", { class: "muted pad" }, ov ? "No lanes reported." : "Lanes are not available.")]));
      // Charts measure their container, so draw them once the lanes are in the page.
      ctx.after = () => {
        lanesData.forEach((l, i) => {
          const box = lanes.children[i] && lanes.children[i].querySelector(".chart-box");
          if (!box) return;
          window.Charts.lines(box, {
            points: Array.isArray(l.history) ? l.history : [], height: 120, empty: "no history in this window",
            series: [
              { key: "depth", label: "queued", color: "var(--st-queued)" },
              { key: "busy", label: "busy", color: "var(--st-running)" },
              { key: "lag_ms", label: "lag", color: "var(--st-failed)", axis: "right" },
            ],
            formatRight: dur,
          });
        });
        window.Charts.stackedBars(outcomes, { buckets, keys, colors, bucketMs: o.bucket_ms, height: 190 });
      };
      if (main().contains(root)) ctx.after();

      failTitle.textContent = winText;
      fill(failures, table(["Job", "Code", "Count", "Last"], fails.map((f) =>
        h("tr", { "data-job": f.job },
          h("td", {}, h("a", { href: runsHref({ job: f.job, code: f.code, since: ovWindow === "day" ? "1d" : "1h" }), "data-key": `fail:${f.job}:${f.code}` }, f.job)),
          h("td", {}, code(f.code) || h("span", { class: "muted" }, "no code")),
          h("td", { class: "num" }, num(f.count)),
          h("td", {}, when(f.last_at)))), { empty: ov ? "No failures in this window." : "Failures are not available." }));

      pausesCard.hidden = !operator;
      failuresCard.classList.toggle("span-2", !operator);
      fill(pausesBox, table(["Scope", "Name", "Since", ""], ps.map((p) =>
        h("tr", {},
          h("td", {}, h("span", { class: "tag" }, p.scope)),
          h("td", {}, p.scope === "job" ? h("a", { href: jobHref(p.name) }, p.name) : p.name),
          h("td", {}, when(p.paused_at)),
          h("td", { class: "actions" }, pauseButton(p.scope, p.name, true)))), { empty: "Nothing is paused." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- jobs

  let jobsFilter = "";

  function lastRunByJob(runs) {
    const last = {};
    for (const r of runs || []) if (r && r.job && !last[r.job]) last[r.job] = r;
    return last;
  }

  function leaseText(lease) {
    if (!lease) return h("span", { class: "muted" }, dash);
    const parts = [];
    if (lease.held) parts.push(h("span", { class: "tag tag-running", title: lease.holder ? "held by " + lease.holder : "held" }, "running"));
    else parts.push(h("span", { class: "muted" }, "free"));
    if (lease.pending) parts.push(" ", h("span", { class: "tag", title: "a kick arrived while it ran: it runs once more" }, "kick pending"));
    return parts;
  }

  function jobsView(ctx) {
    const body = h("div");
    const count = h("span", { class: "card-sub" });
    const filter = h("input", {
      type: "search", id: "jobs-filter", placeholder: "Filter jobs", "aria-label": "Filter jobs", value: jobsFilter,
      oninput: () => { jobsFilter = filter.value; applyFilter(); },
    });
    let rowsAll = [];
    function applyFilter() {
      const q = jobsFilter.trim().toLowerCase();
      let shown = 0;
      for (const tr of rowsAll) {
        const hit = !q || tr.dataset.search.includes(q);
        tr.hidden = !hit;
        if (hit) shown++;
      }
      count.textContent = q ? `${shown} of ${rowsAll.length}` : `${rowsAll.length} job${rowsAll.length === 1 ? "" : "s"}`;
    }
    const root = h("div", { class: "view view-jobs" },
      pageHead("Jobs", { tools: filter }),
      section(null, { class: "flush" }, h("div", { class: "card-head" }, count), body));

    ctx.load = async (errs) => {
      const [jobsBody, runsBody] = await Promise.all([tryGet(errs, "/jobs"), tryGet(errs, "/runs?limit=200"), loadPauses(errs)]);
      if (!ctx.alive()) return;
      const jobs = (jobsBody && Array.isArray(jobsBody.jobs)) ? jobsBody.jobs : [];
      const last = lastRunByJob(runsBody && runsBody.runs);
      rowsAll = jobs.map((j) => {
        const lr = last[j.name];
        const failing = lr && (lr.status === "failed" || lr.status === "crashed");
        return h("tr", {
          "data-job": j.name, class: [failing ? "failing" : "", j.paused ? "paused" : ""].filter(Boolean).join(" ") || null,
          "data-search": [j.name, j.tenant, j.lane, j.schedule].filter(Boolean).join(" ").toLowerCase(),
        },
        h("td", {}, h("a", { href: jobHref(j.name), class: "strong", "data-key": "job:" + j.name }, j.name),
          j.tenant ? h("span", { class: "tag tag-tenant", title: "tenant" }, j.tenant) : null,
          j.per_tenant ? h("span", { class: "tag", title: "one child per tenant" }, "per tenant") : null,
          j.orphaned ? h("span", { class: "tag tag-bad", title: "no longer in the manifest" }, "orphaned") : null),
        h("td", {}, j.lane ? h("span", { class: "mono" }, j.lane) : h("span", { class: "muted" }, dash)),
        h("td", { class: "mono" }, j.schedule || h("span", { class: "muted" }, "on kick")),
        h("td", {}, when(j.next_fire_at)),
        h("td", {}, when(j.last_success_at)),
        h("td", {}, lr ? h("a", { href: runHref(lr.run_id), class: "plain", "data-key": "last:" + j.name }, badge(lr.status), " ", code(lr.code)) : h("span", { class: "muted" }, dash)),
        h("td", {}, leaseText(j.lease)),
        h("td", {}, pausedTag(j)),
        h("td", { class: "actions" },
          changes(h("button", { type: "button", class: "btn-sm", "data-key": "kick:" + j.name, onclick: () => kick(j.name) }, "Kick")),
          jobPauseControls(j)));
      });
      fill(body, table(["Job", "Lane", "Schedule", "Next fire", "Last success", "Last run", "Lease", "Paused", ""], rowsAll,
        { empty: jobsBody ? "No jobs registered." : "Jobs are not available." }));
      applyFilter();
    };
    return root;
  }

  // ---------------------------------------------------------------- job

  let jobWindow = "day";

  // Start a run with a payload (POST /jobs/{job}/runs): the payload goes as typed, so the
  // host's payload rule judges it, and its refusal is shown under the box.
  function startForm(name) {
    const payload = h("textarea", { id: "start-payload", name: "payload", rows: 4, spellcheck: "false", placeholder: '{"key": "value"} (empty: the manifest\'s payload)' });
    const delay = h("input", { id: "start-delay", name: "delay", placeholder: "now (or 30s, 10m, 2h)", autocomplete: "off", maxlength: 16 });
    const error = h("p", { id: "start-error", class: "field-error", role: "alert" });
    const submit = h("button", { type: "submit", class: "primary", id: "start-submit" }, "Start run");
    const form = h("form", { class: "start-form", id: "start-form", onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = "";
      const parts = [];
      if (payload.value.trim()) parts.push(`"payload": ${payload.value}`);
      if (delay.value.trim()) parts.push(`"delay": ${JSON.stringify(delay.value.trim())}`);
      submit.disabled = true;
      try {
        const r = await api(`/jobs/${encodeURIComponent(name)}/runs`, { method: "POST", raw: `{${parts.join(", ")}}` });
        notice(`started ${name}: ${r.result || "created"} (${shortId(r.run_id)})`);
        if (r.run_id) location.hash = runHref(r.run_id);
      } catch (err) {
        error.textContent = err.message;
      } finally {
        submit.disabled = false;
      }
    } },
    h("label", { class: "field" }, h("span", {}, "Payload (JSON)"), payload),
    h("div", { class: "start-row" }, h("label", { class: "field" }, h("span", {}, "Delay"), delay), submit),
    error);
    return section("Start a run", { id: "job-start", class: "span-2", sub: "with a payload of your own" }, form);
  }

  function jobView(ctx) {
    const name = ctx.route.name;
    const badges = h("span", { class: "badges" });
    const tools = h("div", { class: "tools" });
    const statsBox = h("div", { class: "stats" });
    const chart = h("div", { class: "chart-box" });
    const schedule = h("div");
    const lease = h("div");
    const details = h("div");
    const settings = h("div");
    const runs = h("div");
    const chartSub = h("span", { class: "card-sub" });
    const durCard = h("section", { class: "card span-2", "aria-labelledby": "job-dur-h" },
      h("header", { class: "card-head" }, h("h2", { id: "job-dur-h" }, "Duration percentiles"), chartSub, h("span", { class: "fill" }),
        segmented("Window", [["hour", "Hour"], ["day", "Day"], ["week", "Week"]], jobWindow, (w) => {
          jobWindow = w;
          for (const b of durCard.querySelectorAll(".seg button")) b.setAttribute("aria-pressed", String(b.dataset.key.endsWith(":" + w)));
          runLoad(ctx);
        })),
      chart);
    const root = h("div", { class: "view view-job" },
      pageHead(name, { crumbs: [h("a", { href: "#/jobs" }, "Jobs"), " / "], badges, tools }),
      statsBox,
      h("div", { class: "cols" },
        durCard,
        section("Schedule", { id: "job-schedule" }, schedule),
        section("Lease", { id: "job-lease" }, lease),
        changes(startForm(name)),
        section("Recent runs", { id: "job-runs", class: "span-2", tools: h("a", { href: runsHref({ job: name }) }, "All runs of this job →") }, runs),
        section("Details", { id: "job-details", class: "span-2" }, details),
        section("Settings", { id: "job-settings", class: "span-2", sub: "from the manifest, read-only" }, settings)));

    ctx.load = async (errs) => {
      const enc = encodeURIComponent(name);
      const [job, st, rs] = await Promise.all([
        getOrMissing(errs, `/jobs/${enc}`),
        tryGet(errs, `/jobs/${enc}/stats?window=${jobWindow}`),
        tryGet(errs, `/runs?job=${enc}&limit=20`),
        loadPauses(errs)]);
      if (!ctx.alive()) return;
      if (job && job.missing) {
        errs.length = 0;
        showNotFound(ctx, root, job.missing);
        return;
      }
      const j = job || { name };
      const s = st || {};
      fill(badges, 
        j.paused ? pausedTag(j) : null,
        j.orphaned ? h("span", { class: "tag tag-bad" }, "orphaned") : null,
        j.tenant ? h("span", { class: "tag tag-tenant" }, "tenant " + j.tenant) : null,
        (j.lane || s.lane) ? h("span", { class: "tag" }, "lane " + (j.lane || s.lane)) : null);
      fill(tools, 
        changes(h("button", { type: "button", class: "primary", "data-key": "kick", onclick: () => kick(name) }, "Kick")),
        job ? jobPauseControls(j) : null,
        changes(h("button", { type: "button", class: "danger-ghost", "data-key": "cancel-queued", onclick: () => bulkByFilter("cancel", { job: name, status: "queued" }) }, "Cancel queued…")));
      const overall = s.overall || {};
      const wText = { hour: "last hour", day: "last day", week: "last week" }[jobWindow];
      fill(statsBox, 
        stat("Success rate", pct(s.success_rate), wText, s.success_rate !== null && s.success_rate !== undefined && s.success_rate < 0.9 ? "stat-bad" : ""),
        stat("Runs", num(s.runs), `${num(s.succeeded)} ok · ${num(s.failed)} failed`),
        stat("p50", dur(overall.p50), "duration"),
        stat("p95", dur(overall.p95), "duration"),
        stat("p99", dur(overall.p99), "duration"),
        stat("Next fire", j.next_fire_at ? ago(j.next_fire_at) : dash, j.next_fire_at ? absTime(j.next_fire_at) : (j.schedule ? "" : "runs on kick")));
      chartSub.textContent = s.bucket_ms ? `${wText}, per ${bucketName(s.bucket_ms)}` : wText;
      const points = Array.isArray(s.durations) ? s.durations : [];
      const series = [
        { key: "p50", label: "p50", color: "var(--st-succeeded)" },
        { key: "p95", label: "p95", color: "var(--st-queued)" },
        { key: "p99", label: "p99", color: "var(--st-failed)" },
      ];
      // The whole window is drawn (a single bucket is not stretched over the chart).
      const windowMs = { hour: 3600e3, day: 86400e3, week: 7 * 86400e3 }[s.window || jobWindow] || 86400e3;
      const range = [Date.now() - windowMs, Date.now()];
      ctx.after = () => window.Charts.lines(chart, { points, series, format: dur, height: 170, range });
      if (main().contains(root)) ctx.after();

      const fires = Array.isArray(s.next_fires) && s.next_fires.length ? s.next_fires : (j.next_fire_at ? [j.next_fire_at] : []);
      fill(schedule, dl([
        ["Schedule", j.schedule ? h("code", {}, j.schedule) : h("span", { class: "muted" }, "none: runs when kicked")],
        ["Next fires", fires.length ? h("ol", { class: "fires" }, fires.map((f) => h("li", {}, whenAbs(f), " ", h("span", { class: "muted" }, ago(f))))) : h("span", { class: "muted" }, dash)],
        ["Last success", when(j.last_success_at)],
        ["Paused", pausedTag(j)],
      ]));
      const l = j.lease;
      fill(lease, l ? dl([
        ["State", leaseText(l)],
        ["Holder", l.holder ? h("span", { class: "mono" }, l.holder) : h("span", { class: "muted" }, dash)],
        ["Generation", num(l.generation)],
        ["Expires", when(l.expires_at)],
        ["Pending kick", l.pending ? "yes: it runs again when this one ends" : "no"],
      ]) : h("p", { class: "muted pad" }, j.per_tenant ? "Each tenant's child holds its own lease." : "No lease yet."));
      fill(details, dl([
        ["Tenant", j.tenant || h("span", { class: "muted" }, "host")],
        ["Per tenant", j.per_tenant ? "yes" : "no"],
        ["Lane", j.lane || s.lane || dash],
        ["Component", j.component ? h("span", { class: "mono" }, j.component) : null],
        ["Digest", j.component_digest ? h("span", { class: "mono", title: j.component_digest }, shortDigest(j.component_digest)) : dash],
        ["Registered", whenAbs(j.registered_at)],
      ].filter((p) => p[1] !== null)));
      fill(runs, runsTable(rs && Array.isArray(rs.runs) ? rs.runs : [], { select: false, job: false, empty: rs ? "No runs yet." : "Runs are not available." }));
      fill(settings, settingsList(j.settings));
    };
    return root;
  }

  // A job's definition as registered: each setting in words, structured ones as JSON.
  function settingsList(st) {
    if (!st) return h("p", { class: "muted pad" }, "No settings are known for this job.");
    const limits = st.limits || {};
    const retry = st.retry || {};
    const structured = (v) => (isNil(v) || (typeof v === "object" && !Object.keys(v).length) ? h("span", { class: "muted" }, "none") : h("pre", { class: "json" }, json(v)));
    return dl([
      ["Lane", h("span", { class: "mono", "data-setting": "lane" }, st.lane || "default")],
      ["Timeout", h("span", { "data-setting": "timeout" }, limits.timeout || dash)],
      ["Memory", h("span", { "data-setting": "memory" }, limits.memory || dash)],
      ["Fuel", h("span", { "data-setting": "fuel" }, isNil(limits.fuel) ? "unbounded (the timeout bounds it)" : num(limits.fuel))],
      ["Retries", h("span", { "data-setting": "retries" }, `${num(retry.retries)}`, retry.retries ? ` (backoff ${retry.backoff_base} up to ${retry.backoff_max})` : "")],
      ["Grants", h("div", { "data-setting": "grants" }, structured(st.grants))],
      ["Flow", h("div", { "data-setting": "flow" }, structured(st.flow))],
      ["Journal", h("span", { "data-setting": "recorder" }, isNil(st.recorder) ? dash : typeof st.recorder === "object" ? json(st.recorder) : String(st.recorder))],
      st.on && st.on.length ? ["Events", h("span", { class: "mono" }, st.on.join(", "))] : null,
      ["Run on boot", st.run_on_boot ? "yes" : "no"],
    ]);
  }

  // ---------------------------------------------------------------- runs

  const FILTER_KEYS = ["job", "status", "code", "tenant", "instance", "since", "until", "q", "payload"];
  const runsState = { key: null, stack: [], before: null, selected: new Set() };

  function runsTable(runs, opts) {
    const o = opts || {};
    const headers = [];
    if (o.select) headers.push(o.selectAll);
    headers.push("Run");
    if (o.job !== false) headers.push("Job");
    headers.push("Status", "Code", "Last error", "Att.", "Tenant", "Origin", "Created", "Took");
    const rows = runs.map((r) => {
      const cells = [];
      if (o.select) {
        cells.push(h("td", { class: "check" }, h("input", {
          type: "checkbox", "aria-label": "select run " + r.run_id, "data-key": "sel:" + r.run_id,
          checked: runsState.selected.has(r.run_id),
          onchange: (e) => { if (e.target.checked) runsState.selected.add(r.run_id); else runsState.selected.delete(r.run_id); o.onSelect && o.onSelect(); },
        })));
      }
      cells.push(h("td", {}, runLink(r.run_id)));
      if (o.job !== false) cells.push(h("td", {}, h("a", { href: jobHref(r.job), "data-key": "rj:" + r.run_id }, r.job)));
      cells.push(
        h("td", {}, badge(r.status)),
        h("td", {}, code(r.code)),
        h("td", { class: "err", title: r.error || "" }, (r.error || "").split("\n")[0]),
        h("td", { class: "num" }, num(r.attempts)),
        h("td", {}, r.tenant || h("span", { class: "muted" }, dash)),
        h("td", { class: "muted" }, r.origin || ""),
        h("td", {}, when(r.created_at)),
        h("td", { class: "num" }, r.status === "running" && r.started_at ? h("span", { class: "muted" }, ago(r.started_at).replace(" ago", "…")) : dur(r.duration_ms)));
      return h("tr", { "data-run": r.run_id, "data-status": r.status, class: runsState.selected.has(r.run_id) && o.select ? "selected" : null }, cells);
    });
    return table(headers, rows, { empty: o.empty || "No runs match.", class: "runs" });
  }

  function runsFilterOf(params) {
    const f = {};
    for (const k of FILTER_KEYS) {
      const v = (params.get(k) || "").trim();
      if (v) f[k] = v;
    }
    return f;
  }

  function runsView(ctx) {
    const filter = runsFilterOf(ctx.route.params);
    const key = JSON.stringify(filter);
    if (runsState.key !== key) {
      runsState.key = key;
      runsState.stack = [];
      runsState.before = null;
      runsState.selected.clear();
    }
    const field = (name, label, input) => h("label", { class: "field field-" + name }, h("span", {}, label), input);
    const inputs = {
      job: h("input", { name: "job", list: "jobs-list", value: filter.job || "", autocomplete: "off", placeholder: "any" }),
      status: h("select", { name: "status", value: filter.status || "" },
        h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s }, s))),
      code: h("input", { name: "code", value: filter.code || "", placeholder: "any", autocomplete: "off", spellcheck: "false" }),
      tenant: h("input", { name: "tenant", value: filter.tenant || "", placeholder: "any", autocomplete: "off" }),
      since: h("input", { name: "since", value: filter.since || "", placeholder: "1h or RFC 3339", autocomplete: "off" }),
      until: h("input", { name: "until", value: filter.until || "", placeholder: "now", autocomplete: "off" }),
      q: h("input", { name: "q", id: "runs-q", type: "search", value: filter.q || "", maxlength: 200, placeholder: "text in the last error   ( / )", autocomplete: "off", "aria-keyshortcuts": "/" }),
      payload: h("input", { name: "payload", id: "runs-payload", value: filter.payload || "", maxlength: 4096, placeholder: 'payload contains, e.g. {"customer": 42} (with job and tenant only)', autocomplete: "off", spellcheck: "false" }),
    };
    inputs.status.value = filter.status || "";
    const datalist = h("datalist", { id: "jobs-list" });
    const form = h("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
      field("q", "Search", inputs.q),
      field("job", "Job", inputs.job), field("status", "Status", inputs.status), field("code", "Code", inputs.code),
      field("tenant", "Tenant", inputs.tenant), field("since", "Since", inputs.since), field("until", "Until", inputs.until),
      field("payload", "Payload contains", inputs.payload),
      h("div", { class: "filter-buttons" },
        h("button", { type: "submit", class: "primary" }, "Apply"),
        Object.keys(filter).length ? h("a", { href: "#/runs", class: "btn" }, "Clear") : null),
      datalist);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const f = {};
      for (const [k, el] of Object.entries(inputs)) if (el.value.trim()) f[k] = el.value.trim();
      if (filter.instance) f.instance = filter.instance;
      const target = runsHref(f);
      if (location.hash === target) { runsState.stack = []; runsState.before = null; runLoad(ctx); } else location.hash = target;
    });

    const countEl = h("span", { class: "card-sub", id: "runs-count" });
    const selInfo = h("span", { class: "sel-info" });
    const cancelSel = h("button", { type: "button", class: "btn-sm", disabled: true, onclick: () => bulkSelected("cancel", [...runsState.selected]) }, "Cancel selected");
    const retrySel = h("button", { type: "button", class: "btn-sm", disabled: true, onclick: () => bulkSelected("retry", [...runsState.selected]) }, "Retry selected");
    const selectAll = h("input", { type: "checkbox", "aria-label": "select all runs on this page", "data-key": "sel-all" });
    const tableBox = h("div");
    const newer = h("button", { type: "button", "data-key": "newer" }, "← Newer");
    const older = h("button", { type: "button", "data-key": "older" }, "Older →");
    const pageInfo = h("span", { class: "muted" });
    let pageRuns = [];
    let next = null;

    function syncSelection() {
      const n = runsState.selected.size;
      selInfo.textContent = n ? `${n} selected` : "";
      cancelSel.disabled = !n;
      retrySel.disabled = !n;
      cancelSel.textContent = n ? `Cancel ${n} selected` : "Cancel selected";
      retrySel.textContent = n ? `Retry ${n} selected` : "Retry selected";
      const onPage = pageRuns.filter((r) => runsState.selected.has(r.run_id)).length;
      selectAll.checked = onPage > 0 && onPage === pageRuns.length;
      selectAll.indeterminate = onPage > 0 && onPage < pageRuns.length;
      for (const tr of tableBox.querySelectorAll("tr[data-run]")) tr.classList.toggle("selected", runsState.selected.has(tr.dataset.run));
    }
    selectAll.addEventListener("change", () => {
      for (const r of pageRuns) {
        if (selectAll.checked) runsState.selected.add(r.run_id); else runsState.selected.delete(r.run_id);
      }
      for (const cb of tableBox.querySelectorAll("td.check input")) cb.checked = selectAll.checked;
      syncSelection();
    });
    newer.addEventListener("click", () => {
      runsState.before = runsState.stack.pop() || null;
      runLoad(ctx);
    });
    older.addEventListener("click", () => {
      if (!next) return;
      runsState.stack.push(runsState.before);
      runsState.before = next;
      runLoad(ctx);
    });

    const root = h("div", { class: "view view-runs" },
      pageHead("Runs", { tools: filter.payload ? null : changes(h("div", { class: "tools" },
        h("button", { type: "button", class: "danger-ghost", id: "bulk-cancel", onclick: () => bulkByFilter("cancel", filter) }, "Cancel all matching…"),
        h("button", { type: "button", class: "ghost", id: "bulk-retry", onclick: () => bulkByFilter("retry", filter) }, "Retry all matching…"),
        isOperator() ? h("button", { type: "button", class: "danger-ghost", id: "bulk-purge", onclick: () => bulkByFilter("purge", filter) }, "Purge ended matching…") : null)) }),
      h("section", { class: "card", "aria-label": "Filters" }, form),
      h("section", { class: "card flush", "aria-label": "Runs" },
        h("div", { class: "card-head toolbar" }, countEl, selInfo, h("span", { class: "fill" }), changes(cancelSel), changes(retrySel)),
        tableBox,
        h("div", { class: "pager" }, newer, pageInfo, older)));

    // A payload search (GET /runs/search): bounded, newest first, one page; it takes the
    // job and tenant filters only.
    async function loadSearch(errs) {
      const q = new URLSearchParams({ payload: filter.payload, limit: "50" });
      for (const k of ["job", "tenant"]) if (filter[k]) q.set(k, filter[k]);
      let found = null;
      try {
        found = await api("/runs/search?" + q);
      } catch (e) {
        errs.push(describe(e, "/runs/search"));
      }
      if (!ctx.alive()) return;
      pageRuns = found && Array.isArray(found.runs) ? found.runs : [];
      next = null;
      countEl.textContent = !found ? "" : `${pageRuns.length}${pageRuns.length === found.limit ? " newest" : ""} with this payload` +
        (found.complete ? "" : ` (of the newest ${num(found.scan_limit)} runs read)`);
      fill(tableBox, runsTable(pageRuns, { select: !readOnly(), selectAll: h("th", { class: "check", scope: "col" }, selectAll), onSelect: syncSelection, empty: found ? "No run's payload contains this." : "The search failed." }));
      newer.disabled = true;
      older.disabled = true;
      pageInfo.textContent = "";
      syncSelection();
    }

    ctx.load = async (errs) => {
      if (filter.payload) return loadSearch(errs);
      const q = new URLSearchParams(filter);
      q.set("limit", "50");
      if (runsState.before) q.set("before", runsState.before);
      const cq = new URLSearchParams(filter);
      const [rs, cnt, jobs] = await Promise.all([
        tryGet(errs, "/runs?" + q),
        tryGet(errs, "/runs/count" + (cq.toString() ? "?" + cq : "")),
        datalist.childElementCount ? null : tryGet(null, "/jobs")]);
      if (!ctx.alive()) return;
      if (jobs && Array.isArray(jobs.jobs)) fill(datalist, jobs.jobs.map((j) => h("option", { value: j.name })));
      pageRuns = rs && Array.isArray(rs.runs) ? rs.runs : [];
      next = rs ? rs.next || null : null;
      countEl.textContent = cnt ? `${(cnt.capped ? "over " : "")}${num(cnt.count)} matching` : `${pageRuns.length} shown`;
      fill(tableBox, runsTable(pageRuns, { select: !readOnly(), selectAll: h("th", { class: "check", scope: "col" }, selectAll), onSelect: syncSelection, empty: rs ? "No runs match these filters." : "Runs are not available." }));
      newer.disabled = runsState.stack.length === 0;
      older.disabled = !next;
      pageInfo.textContent = `page ${runsState.stack.length + 1}`;
      syncSelection();
    };
    return root;
  }

  // ---------------------------------------------------------------- run

  let logQuery = "";

  function highlight(text, q) {
    if (!q) return [text];
    const out = [];
    const lower = text.toLowerCase();
    let i = 0;
    for (;;) {
      const j = lower.indexOf(q, i);
      if (j < 0) break;
      if (j > i) out.push(text.slice(i, j));
      out.push(h("mark", {}, text.slice(j, j + q.length)));
      i = j + q.length;
    }
    if (i < text.length) out.push(text.slice(i));
    return out;
  }

  const TICKS_PER_ATTEMPT = 200;

  function runView(ctx) {
    const id = ctx.route.id;
    const headBox = h("div");
    const timelineBox = h("div", { class: "chart-box" });
    const attemptsBox = h("div", { class: "attempts" });
    const side = h("div", { class: "side" });
    const below = h("div", { class: "below" });
    const matchInfo = h("span", { class: "card-sub", "aria-live": "polite" });
    const search = h("input", {
      type: "search", id: "log-q", placeholder: "Filter log lines", "aria-label": "Filter log lines", value: logQuery,
      oninput: () => { logQuery = search.value; applyLogFilter(); },
    });
    function applyLogFilter() {
      const q = logQuery.trim().toLowerCase();
      let matched = 0;
      let total = 0;
      for (const list of attemptsBox.querySelectorAll("ol.log")) {
        let here = 0;
        for (const li of list.children) {
          const text = li.dataset.text;
          total++;
          const hit = !q || text.toLowerCase().includes(q);
          li.hidden = !hit;
          if (q || li.firstElementChild) li.replaceChildren(...highlight(text, q));
          if (hit) { matched++; here++; }
        }
        const details = list.closest("details");
        if (q && details) details.open = here > 0;
      }
      matchInfo.textContent = q ? `${matched} of ${total} lines match` : `${total} lines`;
    }
    const root = h("div", { class: "view view-run" },
      headBox,
      h("div", { class: "run-grid" },
        h("div", { class: "run-main" },
          section("Timeline", { id: "run-timeline", sub: "attempts, claims and host calls" }, timelineBox),
          section("Attempts and logs", { id: "run-logs", sub: matchInfo, tools: search }, attemptsBox)),
        side),
      below);

    ctx.load = async (errs) => {
      const r = await getOrMissing(errs, "/runs/" + encodeURIComponent(id));
      if (!ctx.alive()) return;
      if (r && r.missing) {
        showNotFound(ctx, root, r.missing);
        return;
      }
      if (!r) {
        fill(headBox, pageHead("Run " + shortId(id), { crumbs: [h("a", { href: "#/runs" }, "Runs"), " / "] }));
        return;
      }
      const attempts = Array.isArray(r.attempt_records) ? r.attempt_records : [];
      // Attempts that kept a journal: their host calls, from the flight recorder.
      const journals = new Map((Array.isArray(r.journals) ? r.journals : []).map((j) => [j.seq, j]));
      await Promise.all(attempts.filter((a) => journals.has(a.seq)).map(async (a) => {
        const t = await tryGet(errs, `/runs/${encodeURIComponent(id)}/attempts/${a.seq}/calls`);
        if (!t || !Array.isArray(t.calls)) return;
        a.journal = { total: t.total, replayable: t.replayable, shown: t.calls.length };
        a.calls = t.calls.map((c) => {
          const dot = String(c.call).indexOf(".");
          return {
            kind: dot > 0 ? c.call.slice(0, dot) : c.call, name: dot > 0 ? c.call.slice(dot + 1) : "",
            at_ms: (Number(c.at) || 0) / 1000, ms: (Number(c.micros) || 0) / 1000, result: c.code, detail: c.args,
          };
        });
      }));
      if (!ctx.alive()) return;
      const rel = [
        r.retry_of ? ["retry of", r.retry_of] : null,
        r.retried_by ? ["retried by", r.retried_by] : null,
        r.rerun_of ? ["rerun of", r.rerun_of] : null,
        r.resumed_by ? ["resumed by", r.resumed_by] : null,
        r.parent_run ? ["started by", r.parent_run] : null,
      ].filter(Boolean);
      const actions = [];
      if (canCancel(r.status) && !readOnly()) actions.push(h("button", { type: "button", class: "danger", id: "run-cancel", "data-key": "run-cancel", onclick: () => cancelRun(r.run_id) }, "Cancel"));
      if (canRetry(r.status) && !readOnly()) actions.push(h("button", { type: "button", class: "primary", id: "run-retry", "data-key": "run-retry", onclick: () => retryRun(r.run_id) }, "Retry"));
      actions.push(h("a", { class: "btn", href: runsHref({ job: r.job }) }, "Runs of " + r.job));
      fill(headBox, 
        pageHead(h("span", {}, h("a", { href: jobHref(r.job), class: "plain" }, r.job), h("span", { class: "title-id mono", title: r.run_id }, " · " + r.run_id)), {
          crumbs: [h("a", { href: "#/runs" }, "Runs"), " / ", h("a", { href: runsHref({ job: r.job }) }, r.job), " / "],
          badges: h("span", { class: "badges" }, badge(r.status), code(r.code),
            r.kicks_pending > 0 ? h("span", { class: "badge", id: "run-kicks-pending", title: "kicks folded into this run: the job runs once more when it ends" }, r.kicks_pending + " kick pending") : ""),
          tools: h("div", { class: "tools" }, actions),
        }),
        rel.length ? h("p", { class: "relations" }, rel.map(([k, v]) => h("span", {}, k + " ", runLink(v, "rel:" + k)))) : null,
        r.error ? h("pre", { class: "run-error" }, r.error) : null,
        r.held_by ? h("p", { class: "warn-line", id: "run-held" }, "queued, held back by: " + r.held_by) : null,
        r.decode_error ? h("p", { class: "warn-line" }, "decode error: " + r.decode_error) : null,
        Array.isArray(r.actions) && r.actions.length ? h("ul", { class: "run-actions", id: "run-actions" },
          r.actions.slice().reverse().map((a) => h("li", {}, whenAbs(a.at), " ", h("code", {}, a.action), " by ", a.who,
            a.result === "ok" ? "" : [" · ", code(a.result)]))) : null);

      // Timeline: the run from its creation to its end (or now).
      const nowIso = new Date().toISOString();
      const spans = attempts.map((a) => ({
        from: a.started_at, to: a.finished_at, status: a.status || "unknown", row: `#${a.seq}`,
        label: `attempt ${a.seq} (pass ${a.pass}, try ${a.attempt}, generation ${a.generation})${a.code ? " " + a.code : ""}`,
      }));
      const la = r.live_attempt || null;
      // A claimed run waits in its host for a worker: its guest has not started.
      if (r.status === "running" && !attempts.some((a) => !a.finished_at)) {
        const lastEnd = attempts.length ? attempts[attempts.length - 1].finished_at : null;
        const from = (la && la.started_at) || [r.started_at, lastEnd].filter(Boolean).sort().pop() || r.created_at;
        spans.push({ from, to: null, status: "running", row: "now", label: "the current attempt" });
      }
      const ticks = [{ at: r.created_at, label: "queued (run created)", short: "queued" }];
      if (r.scheduled_for && r.scheduled_for !== r.created_at) ticks.push({ at: r.scheduled_for, label: "scheduled for", short: "due" });
      for (const a of attempts) {
        ticks.push({ at: a.started_at, label: `attempt ${a.seq} started${a.host ? " on " + a.host : ""} (generation ${a.generation})`, short: `start #${a.seq}` });
        if (a.finished_at) ticks.push({ at: a.finished_at, label: `attempt ${a.seq} ended: ${a.status}${a.code ? " " + a.code : ""}`, short: false });
        // At most TICKS_PER_ATTEMPT calls are drawn: the rest are in the calls' pages.
        for (const c of (Array.isArray(a.calls) ? a.calls : []).slice(0, TICKS_PER_ATTEMPT)) {
          const t0 = Date.parse(a.started_at);
          if (isNaN(t0)) continue;
          ticks.push({
            at: t0 + (Number(c.at_ms) || 0), kind: "call", ms: Number(c.ms) || 0, error: c.result && c.result !== "ok",
            label: `${c.kind} ${c.name || ""} · ${dur(c.ms)} · ${c.result || ""}${c.detail ? "\n" + c.detail : ""}`,
          });
        }
      }
      if (r.next_attempt_at && r.status === "queued") ticks.push({ at: r.next_attempt_at, label: "next attempt due", short: "next" });
      const endAt = r.finished_at || (r.status === "queued" && r.next_attempt_at && r.next_attempt_at > nowIso ? r.next_attempt_at : nowIso);
      ctx.after = () => window.Charts.timeline(timelineBox, { start: r.created_at, end: endAt, spans, ticks, colorOf });
      if (main().contains(root)) ctx.after();

      // Attempts with their logs (newest first, the newest open).
      const openSeqs = new Set([...attemptsBox.querySelectorAll("details[open]")].map((d) => d.dataset.seq));
      const firstRender = !attemptsBox.childElementCount;
      const list = attempts.slice().reverse().map((a, i) => {
        const lines = String(a.log || "").replace(/\n$/, "").split("\n");
        const calls = Array.isArray(a.calls) ? a.calls : [];
        const open = firstRender ? i === 0 && !la : openSeqs.has(String(a.seq));
        return h("details", { class: "attempt", "data-seq": a.seq, open },
          h("summary", {},
            h("span", { class: "att-seq" }, "#" + a.seq), badge(a.status), code(a.code),
            h("span", { class: "att-meta" }, `pass ${a.pass} · try ${a.attempt} · gen ${a.generation}`),
            h("span", { class: "fill" }),
            h("span", { class: "att-meta" }, dur(a.duration_ms), " · fuel ", num(a.fuel_used), " · ", bytes(a.peak_memory), a.host ? " · " + a.host : ""),
            h("span", { class: "att-meta" }, when(a.started_at))),
          lines.length === 1 && !lines[0] ? h("p", { class: "muted pad" }, "no log output")
            : h("ol", { class: "log" }, lines.map((line) => h("li", { "data-text": line }, line))),
          calls.length ? callsPanel(r.run_id, a.seq, calls) : null,
          a.log_truncated ? h("p", { class: "muted pad" }, "the log was truncated") : null,
          a.journal ? h("p", { class: "muted pad journal" },
            `journal: ${num(a.journal.total)} host calls${a.journal.shown < a.journal.total ? ` (first ${num(a.journal.shown)} shown)` : ""}${a.journal.replayable ? "" : ", truncated at its cap"} · `,
            h("button", { type: "button", class: "link", "data-key": "export-" + a.seq, onclick: () => exportJournal(r.run_id, a.seq) }, "export"),
            " · replay it with ", h("code", {}, `host replay --from ${r.run_id}-${a.seq}.journal --job JOB.wasm`)) : null);
      });
      // The attempt running now, with its log so far (the pulse reloads the view as it grows).
      const liveEl = la ? (() => {
        const lines = String(la.log || "").replace(/\n$/, "").split("\n");
        return h("details", { class: "attempt live", id: "live-attempt", "data-seq": la.seq, open: firstRender || openSeqs.has(String(la.seq)) },
          h("summary", {},
            h("span", { class: "att-seq" }, "#" + la.seq), badge(la.status),
            h("span", { class: "att-meta" }, `pass ${la.pass} · try ${la.attempt} · gen ${la.generation}`),
            h("span", { class: "fill" }),
            h("span", { class: "att-meta", id: "live-running" }, la.status === "claimed" ? "claimed, waiting for a worker" : isNil(la.running_ms) ? "just started" : "running for " + dur(la.running_ms), isNil(la.fuel_used) ? "" : " · fuel so far " + num(la.fuel_used), la.host ? " · " + la.host : ""),
            h("span", { class: "att-meta" }, when(la.started_at))),
          lines.length === 1 && !lines[0] ? h("p", { class: "muted pad" }, "no log output yet")
            : h("ol", { class: "log", id: "live-log" }, lines.map((line) => h("li", { "data-text": line }, line))),
          la.log_truncated ? h("p", { class: "muted pad" }, "the log was truncated") : null);
      })() : null;
      fill(attemptsBox, liveEl, (list.length || liveEl ? list : [h("p", { class: "muted pad" }, r.status === "queued" ? "Not started yet." : "No attempts recorded.")]),
        r.earlier_attempts_omitted ? h("p", { class: "muted pad" }, "earlier attempts are not shown") : null);
      applyLogFilter();

      // The side column: the run's facts.
      const trace = r.trace_id ? (r.trace_url ? h("a", { href: r.trace_url, target: "_blank", rel: "noopener noreferrer", class: "mono" }, r.trace_id) : h("span", { class: "mono" }, r.trace_id)) : dash;
      fill(side, 
        section("Run", { id: "run-facts" }, dl([
          ["Status", badge(r.status)],
          ["Job", h("a", { href: jobHref(r.job) }, r.job)],
          ["Instance", r.instance || dash],
          ["Tenant", r.tenant || h("span", { class: "muted" }, dash)],
          ["Origin", r.origin || dash],
          ["Attempts", num(r.attempts)],
          ["Passes", num(r.passes)],
          ["Defers", num(r.defers)],
          ["Created", whenAbs(r.created_at)],
          r.scheduled_for ? ["Scheduled", whenAbs(r.scheduled_for)] : null,
          ["Started", whenAbs(r.started_at)],
          ["Finished", whenAbs(r.finished_at)],
          ["Duration", dur(r.duration_ms)],
          r.next_attempt_at ? ["Next attempt", when(r.next_attempt_at)] : null,
          r.host ? ["Host", h("span", { class: "mono" }, r.host)] : null,
          ["Trace", trace],
          ...rel.map(([k, v]) => [k[0].toUpperCase() + k.slice(1), runLink(v, "side:" + k)]),
        ])),
        section("Counters", { id: "run-counters" }, (() => {
          const entries = r.counters && typeof r.counters === "object" ? Object.entries(r.counters) : [];
          return entries.length ? dl(entries.map(([k, v]) => [k, h("span", { class: "mono" }, typeof v === "object" ? json(v) : String(v))]))
            : h("p", { class: "muted pad" }, "none");
        })()),
        section("Cursor", { id: "run-cursor" }, r.cursor === null || r.cursor === undefined
          ? h("p", { class: "muted pad" }, r.cursor_omitted ? "too large to show" : "none")
          : h("pre", { class: "json" }, json(r.cursor))));

      const steps = Array.isArray(r.steps) ? r.steps : [];
      const files = Array.isArray(r.files) ? r.files : [];
      const links = attempts.flatMap((a) => (Array.isArray(a.calls) ? a.calls : []).filter((c) => c.kind === "links").map((c) => ({ a, c }))).slice(0, CALLS_PAGE);
      fill(below, h("div", { class: "cols" },
        section("Steps", { id: "run-steps", sub: steps.length ? `${steps.length} recorded` : "" }, table(["Pass", "Name", "Result", "Gen", "Recorded"], steps.map((s) => h("tr", {},
          h("td", { class: "num" }, num(s.pass)), h("td", { class: "mono" }, s.name),
          h("td", {}, h("code", { class: "clip", title: json(s.result) }, JSON.stringify(s.result) || "null")),
          h("td", { class: "num" }, num(s.generation)), h("td", {}, when(s.recorded_at)))), { empty: "No steps recorded." })),
        section("Files", { id: "run-files" }, table(["Collection", "Name", "Size", "Digest", "Status", "Attached"], files.map((f) => h("tr", {},
          h("td", {}, f.collection), h("td", { class: "mono" }, f.name), h("td", { class: "num" }, bytes(f.size)),
          h("td", { class: "mono", title: f.digest || "" }, shortDigest(f.digest)), h("td", {}, h("span", { class: "tag" }, f.status || dash)),
          h("td", {}, when(f.attached_at)))), { empty: Array.isArray(r.files) ? "No files attached." : "Files are not reported by this host." })),
        section("Links", { id: "run-links", sub: "calls to mounted services" }, table(["Attempt", "At", "Name", "Took", "Result", "Detail"], links.map(({ a, c }) => h("tr", {},
          h("td", {}, "#" + a.seq), h("td", { class: "num" }, "+" + dur(c.at_ms)), h("td", { class: "mono" }, c.name || ""),
          h("td", { class: "num" }, dur(c.ms)), h("td", {}, c.result === "ok" ? h("span", { class: "ok" }, "ok") : code(c.result)),
          h("td", { class: "err" }, c.detail || ""))), { empty: "No links calls." })),
        section("Payload", { id: "run-payload" }, h("pre", { class: "json" }, json(r.payload === undefined ? null : r.payload)))));
    };
    return root;
  }

  // Host calls shown a page at a time, so an attempt that journaled thousands of calls
  // keeps its page short: a summary by capability, then one capability's calls (or all),
  // CALLS_PAGE at a time. Which page is open survives the view's live reloads.
  const CALLS_PAGE = 50;
  const callsState = new Map();

  function callsPanel(runId, seq, calls) {
    const key = runId + "/" + seq;
    const st = callsState.get(key) || { kind: "", page: 0 };
    callsState.set(key, st);
    const byKind = new Map();
    for (const c of calls) {
      const g = byKind.get(c.kind) || { n: 0, errors: 0, ms: 0 };
      g.n++;
      g.ms += Number(c.ms) || 0;
      if (c.result && c.result !== "ok") g.errors++;
      byKind.set(c.kind, g);
    }
    const box = h("div", { class: "calls-panel", "data-calls": key });
    const render = () => {
      const shown = st.kind ? calls.filter((c) => c.kind === st.kind) : calls;
      const pages = Math.max(1, Math.ceil(shown.length / CALLS_PAGE));
      st.page = Math.min(st.page, pages - 1);
      const slice = shown.slice(st.page * CALLS_PAGE, (st.page + 1) * CALLS_PAGE);
      const pick = (kind) => () => { st.kind = kind; st.page = 0; render(); };
      const turn = (by) => () => { st.page += by; render(); };
      fill(box,
        table(["Capability", "Calls", "Failed", "Time", ""], [...byKind.entries()].map(([kind, g]) => h("tr", { "data-kind": kind, class: st.kind === kind ? "selected" : null },
          h("td", {}, h("span", { class: "tag" }, kind)), h("td", { class: "num" }, num(g.n)), h("td", { class: "num" }, g.errors ? h("span", { class: "err" }, num(g.errors)) : "0"),
          h("td", { class: "num" }, dur(g.ms)),
          h("td", { class: "actions" }, h("button", { type: "button", class: "btn-sm", "data-key": `calls-kind:${key}:${kind}`, "aria-pressed": String(st.kind === kind), onclick: pick(st.kind === kind ? "" : kind) }, st.kind === kind ? "All calls" : "Show")))),
        { class: "calls-summary" }),
        table(["At", "Kind", "Name", "Took", "Result", "Detail"], slice.map((c) => h("tr", { "data-call": "" },
          h("td", { class: "num" }, "+" + dur(c.at_ms)), h("td", {}, h("span", { class: "tag" }, c.kind)), h("td", { class: "mono" }, c.name || ""),
          h("td", { class: "num" }, dur(c.ms)), h("td", {}, c.result === "ok" ? h("span", { class: "ok" }, "ok") : code(c.result)),
          h("td", { class: "err" }, c.detail || ""))), { class: "calls" }),
        pages > 1 ? h("div", { class: "pager" },
          h("button", { type: "button", "data-key": `calls-prev:${key}`, disabled: st.page === 0, onclick: turn(-1) }, "← Earlier"),
          h("span", { class: "muted calls-page" }, `calls ${num(st.page * CALLS_PAGE + 1)}–${num(st.page * CALLS_PAGE + slice.length)} of ${num(shown.length)}${st.kind ? " " + st.kind : ""}`),
          h("button", { type: "button", "data-key": `calls-next:${key}`, disabled: st.page >= pages - 1, onclick: turn(1) }, "Later →")) : null);
    };
    render();
    return box;
  }

  // The journal as a file: fetched with the token (a plain link would carry none).
  async function exportJournal(runId, seq) {
    const path = `/runs/${encodeURIComponent(runId)}/attempts/${seq}/journal`;
    try {
      const body = await api(path);
      const url = URL.createObjectURL(new Blob([JSON.stringify(body)], { type: "application/json" }));
      const a = h("a", { href: url, download: `${runId}-${seq}.journal` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    } catch (e) {
      fail(e, "export the journal");
    }
  }

  // A GET whose 404 is an answer, not a failure: `{missing: message}` (another tenant's
  // job or run is, to a tenant's token, no job or run at all).
  async function getOrMissing(errs, path) {
    try {
      return await api(path);
    } catch (e) {
      if (e.status === 404) return { missing: e.message };
      errs.push(describe(e, path));
      return null;
    }
  }

  // Replaces a view with a plain not-found page: no skeleton, no controls, nothing of the
  // view it replaced; live updates leave it as it is.
  function showNotFound(ctx, root, message) {
    ctx.view = "notfound";
    ctx.load = async () => {};
    ctx.after = null;
    root.className = "view view-notfound";
    fill(root, pageHead("Not found"), h("p", { id: "not-found" }, message), h("p", {}, h("a", { href: "#/" }, "Go to the overview.")));
  }

  function notFoundView(ctx) {
    ctx.view = "notfound";
    ctx.load = async () => {};
    return h("div", { class: "view" }, pageHead("Not found"), h("p", {}, "No such view. ", h("a", { href: "#/" }, "Go to the overview.")));
  }

  // ---------------------------------------------------------------- tokens

  function tokenState(t) {
    if (t.revoked_at) return h("span", { class: "muted" }, "revoked ", when(t.revoked_at));
    if (t.expired) return h("span", { class: "tag tag-bad" }, "expired");
    if (t.expires_at) return h("span", {}, "live · expires ", when(t.expires_at));
    return "live";
  }

  async function revokeToken(t) {
    const ok = await confirmDialog({
      title: "Revoke this token?",
      body: [h("p", {}, "Token ", h("code", {}, t.id), t.label ? [" (", t.label, ")"] : "", " is refused from now on, everywhere.")],
      yes: "Revoke",
    });
    if (!ok) return;
    try {
      await api(`/tokens/${encodeURIComponent(t.id)}`, { method: "DELETE" });
      notice("revoked token " + t.id);
      refreshSoon(0);
    } catch (e) {
      fail(e, "revoke token " + t.id);
    }
  }

  function tokensView(ctx) {
    const body = h("div");
    const shown = h("div", { id: "token-created", "aria-live": "polite" });
    const kind = h("select", { name: "kind", id: "token-kind" },
      h("option", { value: "read_only" }, "read-only"), h("option", { value: "tenant" }, "tenant"), h("option", { value: "operator" }, "operator"));
    const tenant = h("input", { name: "tenant", id: "token-tenant", placeholder: "tenant name", autocomplete: "off", maxlength: 64 });
    const label = h("input", { name: "label", id: "token-label", placeholder: "who holds it", autocomplete: "off", maxlength: 200 });
    const expires = h("input", { name: "expires", id: "token-expires", placeholder: "never (or 90m, 12h, 30d)", autocomplete: "off", maxlength: 16 });
    const field = (text, input) => h("label", { class: "field" }, h("span", {}, text), input);
    const form = h("form", { class: "filters", id: "token-form", onsubmit: async (e) => {
      e.preventDefault();
      const asked = { label: label.value.trim(), read_only: kind.value === "read_only" };
      if (kind.value === "tenant") asked.tenant = tenant.value.trim();
      if (expires.value.trim()) asked.expires = expires.value.trim();
      try {
        const t = await api("/tokens", { method: "POST", body: asked });
        fill(shown, h("p", { class: "warn-line" }, "Token ", h("code", {}, t.id), " created; it is shown only now:"),
          h("pre", { class: "json", id: "token-secret" }, t.token));
        label.value = ""; expires.value = "";
        refreshSoon(0);
      } catch (err) {
        fail(err, "create a token");
      }
    } },
    field("Kind", kind), field("Tenant", tenant), field("Label", label), field("Expires in", expires),
    h("button", { type: "submit", class: "primary" }, "Create token"));
    const root = h("div", { class: "view view-tokens" }, pageHead("Tokens"),
      changes(section("New token", { id: "token-new" }, form, shown)),
      section(null, { class: "flush" }, body));
    ctx.load = async (errs) => {
      const got = await tryGet(errs, "/tokens");
      if (!ctx.alive()) return;
      const tokens = got && Array.isArray(got.tokens) ? got.tokens.slice().reverse() : [];
      fill(body, table(["Id", "Kind", "Tenant", "Label", "Created", "State", ""], tokens.map((t) => h("tr", { "data-token": t.id },
        h("td", { class: "mono" }, t.id),
        h("td", {}, String(t.kind || "").replace("_", "-")),
        h("td", {}, t.tenant || h("span", { class: "muted" }, dash)),
        h("td", {}, t.label || h("span", { class: "muted" }, dash)),
        h("td", {}, whenAbs(t.created_at)),
        h("td", {}, tokenState(t)),
        h("td", { class: "actions" }, t.revoked_at ? null : changes(h("button", { type: "button", class: "btn-sm danger-ghost", "data-key": "revoke:" + t.id, onclick: () => revokeToken(t) }, "Revoke"))))),
      { empty: got ? "No tokens." : "Tokens are an operator's." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- audit

  function auditView(ctx) {
    const params = ctx.route.params;
    const body = h("div");
    const action = h("input", { name: "action", id: "audit-action", value: params.get("action") || "", placeholder: "any (run.cancel, token.create…)", autocomplete: "off", maxlength: 32 });
    const since = h("input", { name: "since", id: "audit-since", value: params.get("since") || "", placeholder: "any (1h, 7d)", autocomplete: "off", maxlength: 40 });
    const form = h("form", { class: "filters", onsubmit: (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (action.value.trim()) q.set("action", action.value.trim());
      if (since.value.trim()) q.set("since", since.value.trim());
      location.hash = "#/audit" + (q.toString() ? "?" + q : "");
    } },
    h("label", { class: "field" }, h("span", {}, "Action"), action),
    h("label", { class: "field" }, h("span", {}, "Since"), since),
    h("button", { type: "submit", class: "primary" }, "Apply"));
    const root = h("div", { class: "view view-audit" }, pageHead("Audit log"), section(null, {}, form), section(null, { class: "flush" }, body));
    ctx.load = async (errs) => {
      const q = new URLSearchParams();
      for (const k of ["action", "since"]) if (params.get(k)) q.set(k, params.get(k));
      q.set("limit", "200");
      const got = await tryGet(errs, "/audit?" + q);
      if (!ctx.alive()) return;
      const rows = got && Array.isArray(got.audit) ? got.audit : [];
      fill(body, table(["When", "Who", "Action", "Object", "Result", "Run"], rows.map((a) => h("tr", { "data-audit": a.id },
        h("td", {}, whenAbs(a.at)),
        h("td", {}, a.who),
        h("td", {}, h("code", {}, a.action)),
        h("td", {}, a.object),
        h("td", {}, a.result === "ok" ? "ok" : code(a.result)),
        h("td", {}, a.run_id ? runLink(a.run_id, "audit-run:" + a.id) : h("span", { class: "muted" }, dash)))),
      { empty: got ? "No changes recorded." : "The audit log is not available." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- tenants

  async function setTenant(name, active) {
    if (!active) {
      const ok = await confirmDialog({
        title: "Disable this tenant?",
        body: [h("p", {}, "Tenant ", h("code", {}, name), "'s tokens are refused and its queued runs end skipped (", h("code", {}, "tenant_disabled"), ") until it is enabled again.")],
        yes: "Disable",
      });
      if (!ok) return;
    }
    try {
      await api(`/tenants/${encodeURIComponent(name)}/${active ? "enable" : "disable"}`, { method: "POST" });
      notice(`${active ? "enabled" : "disabled"} tenant ${name}`);
      refreshSoon(0);
    } catch (e) {
      fail(e, `${active ? "enable" : "disable"} tenant ${name}`);
    }
  }

  // The registry (operators): add, disable and enable, and each tenant's use of its quota
  // in the last hour.
  function tenantsView(ctx) {
    const body = h("div");
    const name = h("input", { id: "tenant-name", name: "name", placeholder: "lowercase name", autocomplete: "off", maxlength: 64 });
    const error = h("p", { id: "tenant-error", class: "field-error pad", role: "alert" });
    const form = h("form", { class: "start-row pad", id: "tenant-form", onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = "";
      try {
        await api("/tenants", { method: "POST", body: { name: name.value.trim() } });
        notice("added tenant " + name.value.trim());
        name.value = "";
        refreshSoon(0);
      } catch (err) {
        error.textContent = err.message;
      }
    } }, h("label", { class: "field" }, h("span", {}, "Name"), name), h("button", { type: "submit", class: "primary" }, "Add tenant"));
    const root = h("div", { class: "view view-tenants" }, pageHead("Tenants"),
      changes(section("New tenant", { id: "tenant-new" }, form, error)),
      section("Tenants", { id: "tenant-list", class: "flush", sub: "quota use over the last hour" }, body));
    const used = (n, of, fmt) => isNil(of) ? fmt(n) : [fmt(n), " of ", fmt(of), " ", meter(Number(n) || 0, Number(of) || 0)];
    ctx.load = async (errs) => {
      const [got, usage] = await Promise.all([tryGet(errs, "/tenants"), tryGet(errs, "/usage")]);
      if (!ctx.alive()) return;
      const tenants = got && Array.isArray(got.tenants) ? got.tenants : [];
      const use = new Map((usage && Array.isArray(usage.tenants) ? usage.tenants : []).map((u) => [u.tenant, u]));
      fill(body, table(["Tenant", "State", "Attempts", "Fuel", "Wall time", "Added", ""], tenants.map((t) => {
        const u = use.get(t.name) || {};
        const q = u.quota || {};
        return h("tr", { "data-tenant": t.name, "data-active": String(!!t.active) },
          h("td", {}, h("a", { href: runsHref({ tenant: t.name }) }, t.name)),
          h("td", {}, t.active ? "active" : h("span", { class: "tag tag-bad" }, "disabled"), u.over ? h("span", { class: "tag tag-bad" }, "over quota") : null),
          h("td", { class: "num" }, num(u.attempts || 0)),
          h("td", { class: "num", "data-use": "fuel" }, used(u.fuel_used || 0, q.fuel_per_hour, num)),
          h("td", { class: "num", "data-use": "wall" }, used(u.wall_ms || 0, q.time_per_hour_ms, dur)),
          h("td", {}, when(t.created_at)),
          h("td", { class: "actions" }, changes(t.active
            ? h("button", { type: "button", class: "btn-sm danger-ghost", "data-key": "disable:" + t.name, onclick: () => setTenant(t.name, false) }, "Disable")
            : h("button", { type: "button", class: "btn-sm", "data-key": "enable:" + t.name, onclick: () => setTenant(t.name, true) }, "Enable"))));
      }), { empty: got ? "No tenants registered." : "Tenants are an operator's." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- reports

  const REPORT_KINDS = [["", "All"], ["run_failed", "Failed"], ["crashed", "Crashed"], ["missed", "Missed"],
    ["dropped", "Dropped"], ["path_refused", "Refused"], ["lease_lost", "Lease lost"], ["cancelled", "Cancelled"]];
  const CODE_COLORS = ["var(--st-failed)", "var(--st-crashed)", "var(--st-queued)", "var(--st-cancelled)",
    "var(--accent)", "var(--st-running)", "var(--st-skipped)"];
  let failWindow = "day";

  // Failures over time by code (a stacked bar chart of the overview's buckets) and the
  // reports the host wrote: failed, crashed, missed, dropped, refused.
  function reportsView(ctx) {
    const kind = ctx.route.params.get("kind") || "";
    const chart = h("div", { class: "chart-box", id: "failures-chart" });
    const body = h("div");
    const chartCard = h("section", { class: "card", "aria-labelledby": "failures-h" },
      h("header", { class: "card-head" }, h("h2", { id: "failures-h" }, "Failures by code"), h("span", { class: "fill" }),
        segmented("Failures window", [["hour", "Hour"], ["day", "Day"], ["week", "Week"]], failWindow, (w) => {
          failWindow = w;
          for (const b of chartCard.querySelectorAll(".seg button")) b.setAttribute("aria-pressed", String(b.dataset.key.endsWith(":" + w)));
          runLoad(ctx);
        })),
      chart);
    const kinds = segmented("Report kind", REPORT_KINDS, kind, (k) => { location.hash = "#/reports" + (k ? "?kind=" + k : ""); });
    const root = h("div", { class: "view view-reports" }, pageHead("Reports"), chartCard,
      section("Reports", { id: "report-list", class: "flush", sub: "the newest 200", tools: kinds }, body));
    ctx.load = async (errs) => {
      const [f, r] = await Promise.all([tryGet(errs, "/failures?window=" + failWindow), tryGet(errs, "/reports?limit=200")]);
      if (!ctx.alive()) return;
      const codes = f && Array.isArray(f.codes) ? f.codes : [];
      const colors = {};
      codes.forEach((c, i) => { colors[c] = CODE_COLORS[i % CODE_COLORS.length]; });
      const buckets = f && Array.isArray(f.buckets) ? f.buckets : [];
      ctx.after = () => window.Charts.stackedBars(chart, { buckets, keys: codes, colors, bucketMs: f && f.bucket_ms, height: 190, empty: "no failures in this window" });
      if (main().contains(root)) ctx.after();
      chart.dataset.codes = codes.join(",");
      const all = r && Array.isArray(r.reports) ? r.reports : [];
      const shown = kind ? all.filter((x) => x.kind === kind) : all;
      fill(body, table(["At", "Kind", "Job", "Run", "Code", "Detail"], shown.map((x) => h("tr", { "data-report": x.id, "data-kind": x.kind },
        h("td", {}, whenAbs(x.at)),
        h("td", {}, h("span", { class: "tag" }, x.kind)),
        h("td", {}, x.job ? h("a", { href: jobHref(x.job) }, x.job) : dash),
        h("td", {}, x.run_id ? runLink(x.run_id, "rep:" + x.id) : h("span", { class: "muted" }, dash)),
        h("td", {}, code(x.code)),
        h("td", { class: "err" }, x.reason || x.error || x.message || ""))),
      { empty: r ? "No reports of this kind." : "Reports are not available." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- hosts

  // The fleet from its heartbeats (operators): who is alive, its lanes, workers, version.
  function hostsView(ctx) {
    const body = h("div");
    const sub = h("span", { class: "card-sub" });
    const root = h("div", { class: "view view-hosts" }, pageHead("Hosts"),
      section(null, { class: "flush" }, h("div", { class: "card-head" }, sub), body));
    ctx.load = async (errs) => {
      const got = await tryGet(errs, "/hosts");
      if (!ctx.alive()) return;
      const hosts = got && Array.isArray(got.hosts) ? got.hosts : [];
      const alive = hosts.filter((x) => x.alive).length;
      sub.textContent = got ? `${alive} of ${hosts.length} alive · a heartbeat every ${dur(got.heartbeat_ms)}` : "";
      fill(body, table(["Host", "State", "Version", "Lanes", "Workers busy", "Started", "Last seen"], hosts.map((x) => {
        const w = x.workers || {};
        return h("tr", { "data-host": x.host, "data-state": x.state },
          h("td", { class: "mono" }, x.host, x.this_host ? h("span", { class: "tag", title: "the host this page talks to" }, "this host") : null),
          h("td", {}, x.state === "alive" ? h("span", { class: "ok" }, "alive") : h("span", { class: "tag tag-bad" }, x.state)),
          h("td", { class: "mono" }, x.version),
          h("td", {}, (Array.isArray(x.lanes) ? x.lanes : []).map((l) =>
            h("span", { class: "tag", "data-lane": l.lane, title: `${l.busy} of ${l.workers} workers busy` }, `${l.lane} ${num(l.busy)}/${num(l.workers)}`))),
          h("td", { class: "num" }, `${num(w.busy)} / ${num(w.total)}`, meter(Number(w.busy) || 0, Number(w.total) || 0)),
          h("td", {}, when(x.started_at)),
          h("td", {}, when(x.seen_at)));
      }), { empty: got ? "No host has sent a heartbeat." : "Hosts are an operator's." }));
    };
    return root;
  }

  // ---------------------------------------------------------------- upcoming

  // Runs due later and the schedules' next fires, soonest first.
  function upcomingView(ctx) {
    const body = h("div");
    const root = h("div", { class: "view view-upcoming" }, pageHead("Upcoming"),
      section("Due later", { id: "upcoming-list", class: "flush", sub: "runs due later and the next fires of schedules" }, body));
    ctx.load = async (errs) => {
      const got = await tryGet(errs, "/upcoming?limit=200");
      if (!ctx.alive()) return;
      const due = got && Array.isArray(got.upcoming) ? got.upcoming : [];
      fill(body, table(["Due", "In", "Job", "What", "Run"], due.map((d) => {
        const r = d.run || {};
        const job = d.kind === "run" ? r.job : d.job;
        return h("tr", { "data-upcoming": d.kind, "data-job": job, "data-run": d.kind === "run" ? r.run_id : null },
          h("td", {}, whenAbs(d.at)),
          h("td", {}, when(d.at)),
          h("td", {}, h("a", { href: jobHref(job) }, job)),
          h("td", {}, d.kind === "run" ? r.why : ["schedule ", h("code", {}, d.schedule)]),
          h("td", {}, d.kind === "run" ? runLink(r.run_id, "up:" + r.run_id) : h("span", { class: "muted" }, "fires then")));
      }), { empty: got ? "Nothing is due later." : "Upcoming runs are not available." }));
    };
    return root;
  }

  const VIEWS = {
    overview: overviewView, jobs: jobsView, job: jobView, runs: runsView, run: runView,
    tokens: tokensView, audit: auditView, hosts: hostsView, upcoming: upcomingView, tenants: tenantsView, reports: reportsView,
    notfound: notFoundView,
  };

  // ---------------------------------------------------------------- live updates

  const live = { version: null, backoff: 1000, abort: null, poll: null, timer: null };

  function setLive(state, text) {
    const el = document.getElementById("live");
    el.dataset.state = state;
    $(".live-text", el).textContent = text || state;
    el.title = {
      live: "live: the page updates as runs change",
      connecting: "connecting to live updates",
      off: "disconnected: reconnecting",
      polling: "live updates unavailable: refreshing every 5 s",
    }[state] || state;
  }

  function onPulse(data) {
    let p;
    try { p = JSON.parse(data); } catch (_) { return; }
    if (!p || typeof p !== "object") return;
    const parts = [];
    if (!isNil(p.queued)) parts.push(`${Number(p.queued).toLocaleString()} queued`);
    if (!isNil(p.running)) parts.push(`${Number(p.running).toLocaleString()} running`);
    if (!isNil(p.busy)) parts.push(`${Number(p.busy).toLocaleString()} busy`);
    document.getElementById("pulse").textContent = parts.join(" · ");
    const v = p.version === undefined ? null : String(p.version);
    if (live.version !== null && v !== live.version) refreshSoon();
    live.version = v;
  }

  function reconnectLater() {
    setLive("off", "reconnecting");
    clearTimeout(live.timer);
    live.timer = setTimeout(connect, live.backoff);
    live.backoff = Math.min(10000, live.backoff * 2);
  }

  async function connect() {
    if (!token() || live.poll) return;
    if (live.abort) live.abort.abort();
    const abort = new AbortController();
    live.abort = abort;
    setLive("connecting");
    let response;
    try {
      response = await fetch("/stream", { headers: { Authorization: "Bearer " + token(), Accept: "text/event-stream" }, cache: "no-store", signal: abort.signal });
    } catch (_) {
      if (!abort.signal.aborted) reconnectLater();
      return;
    }
    if (response.status === 404) {
      setLive("polling", "polling");
      live.poll = setInterval(() => refreshSoon(), 5000);
      return;
    }
    if (response.status === 401) { signOut("the token was refused: sign in again"); return; }
    if (!response.ok || !response.body) { reconnectLater(); return; }
    setLive("live", "live");
    live.backoff = 1000;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let event = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith(":")) continue;
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") event = val;
            else if (field === "data") data.push(val);
          }
          if (event === "pulse" && data.length) onPulse(data.join("\n"));
        }
      }
    } catch (_) {
      // the stream dropped
    }
    if (abort.signal.aborted) return;
    reconnectLater();
  }

  function stopLive() {
    if (live.abort) live.abort.abort();
    live.abort = null;
    clearInterval(live.poll);
    live.poll = null;
    clearTimeout(live.timer);
    live.version = null;
  }

  // ---------------------------------------------------------------- sign in

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    canPause = null;
    me = null;
    stopLive();
    generation++;
    document.body.classList.add("signed-out");
    const m = main();
    m.replaceChildren();
    m.removeAttribute("data-view");
    document.getElementById("signin").hidden = false;
    document.getElementById("pulse").textContent = "";
    setLive("off", "signed out");
    if (message) { loadErrors = [message]; renderErrors(); }
    document.getElementById("token").focus();
  }

  function signedIn() {
    document.body.classList.remove("signed-out");
    document.getElementById("signin").hidden = true;
    loadErrors = [];
    renderErrors();
    connect();
    route();
  }

  // ---------------------------------------------------------------- keyboard

  let pendingFocus = null;

  document.addEventListener("keydown", (e) => {
    if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (document.getElementById("confirm").open || !token()) return;
    e.preventDefault();
    const box = document.getElementById("runs-q");
    if (box && current && current.view === "runs" && main().dataset.view === "runs") { box.focus(); box.select(); return; }
    pendingFocus = { view: "runs", id: "runs-q" };
    location.hash = "#/runs";
  });

  // ---------------------------------------------------------------- start

  function start() {
    // The token comes in the URL's fragment (never sent to the server, so never in its
    // logs) or from the sign-in form, and is kept for this tab only.
    const frag = location.hash.replace(/^#/, "");
    if (frag.startsWith("token=")) {
      const t = new URLSearchParams(frag).get("token");
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      history.replaceState(null, "", location.pathname + location.search + "#/");
    }
    document.getElementById("signin").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = document.getElementById("token").value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      document.getElementById("token").value = "";
      signedIn();
    });
    window.addEventListener("hashchange", () => { if (token()) route(); });
    // The modal dialog already makes the page behind it inert; Tab also cycles inside it
    // rather than leaving for the browser's own controls.
    const dialog = document.getElementById("confirm");
    dialog.addEventListener("keydown", (e) => {
      if (e.key !== "Tab") return;
      const items = [...dialog.querySelectorAll("button, a[href], input, select, textarea")].filter((x) => !x.disabled);
      if (!items.length) return;
      const first = items[0];
      const last = items[items.length - 1];
      if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
      else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
    });
    let resizeTimer = null;
    let lastWidth = window.innerWidth;
    window.addEventListener("resize", () => {
      if (window.innerWidth === lastWidth) return;
      lastWidth = window.innerWidth;
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { if (current && current.after && main().dataset.view) current.after(); }, 200);
    });
    if (!token()) { signOut(); return; }
    signedIn();
  }

  start();
})();
