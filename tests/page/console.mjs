// Drives the operator console in headless Chromium against a real host.
//
//   node tests/page/console.mjs <scenario.json>
//
// The scenario (written by tests/page.rs):
//   { "chromium": "/usr/bin/chromium", "url": "http://127.0.0.1:PORT", "token": "...",
//     "tenant_token": "...", "read_only_token": "...", "out": "/dir/for/screenshots",
//     "expect": { "job": "broken", "failed_run": "ID", "running_run": "ID",
//                 "tenant_job": "acme-report", "hidden_from_tenant": "greeter" } }
//
// Prints one JSON line per check, {"check", "ok", "detail"}, then {"summary": {...}};
// exits 1 if any check failed (2 if the scenario could not even start).
//
// playwright-core (the version tests/page/package.json pins) is loaded from the
// node_modules directory JOBHOST_PAGE_TOOLS names (scripts/test installs it into
// target/page-tools/node_modules), else from tests/page/node_modules (`npm install` here).
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const tools = path.resolve(process.env.JOBHOST_PAGE_TOOLS || path.join(here, "node_modules"));
let chromium;
try {
  // Resolved as if from a file inside that node_modules directory.
  ({ chromium } = createRequire(path.join(tools, "jobhost-page-test.cjs"))("playwright-core"));
} catch (e) {
  console.error(`playwright-core is not installed in ${tools} (set JOBHOST_PAGE_TOOLS, or run npm install in tests/page): ${e.message}`);
  process.exit(2);
}

const WAIT = 10_000;

const scenarioPath = process.argv[2];
if (!scenarioPath) {
  console.error("usage: node console.mjs <scenario.json>");
  process.exit(2);
}
const scenario = JSON.parse(fs.readFileSync(scenarioPath, "utf8"));
const base = String(scenario.url || "").replace(/\/+$/, "");
const expect = scenario.expect || {};
const out = scenario.out || path.join(process.cwd(), "console-screenshots");
fs.mkdirSync(out, { recursive: true });

const results = [];
function report(check, ok, detail) {
  const line = { check, ok: !!ok, detail: detail === undefined ? "" : String(detail) };
  results.push(line);
  console.log(JSON.stringify(line));
}

// The page the checks are on now: shot when a check fails, to see why.
let onPage = null;

// Runs `fn` as one check: it passes unless it throws; what it returns is the detail.
async function check(name, fn) {
  try {
    const detail = await fn();
    report(name, true, detail);
    return true;
  } catch (e) {
    let detail = (e && e.message ? e.message : String(e)).split("\n").slice(0, 3).join(" ");
    if (onPage && !onPage.isClosed()) {
      const file = path.join(out, "failed-" + name.replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "").toLowerCase() + ".png");
      const saved = await onPage.screenshot({ path: file, fullPage: true }).then(() => true, () => false);
      if (saved) detail += ` (screenshot ${file})`;
    }
    report(name, false, detail);
    return false;
  }
}

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// ------------------------------------------------------------------ PNG (no extra package)

// Decodes an 8-bit, non-interlaced greyscale/RGB/RGBA PNG (what Chromium writes) into
// pixels and tells how many distinct colours it has and the share of the commonest one.
function pngStats(buffer) {
  const sig = buffer.subarray(0, 8).toString("hex");
  assert(sig === "89504e470d0a1a0a", "not a PNG");
  let pos = 8;
  let width = 0, height = 0, depth = 0, colorType = 0, interlace = 0;
  const idat = [];
  while (pos < buffer.length) {
    const len = buffer.readUInt32BE(pos);
    const type = buffer.subarray(pos + 4, pos + 8).toString("latin1");
    const data = buffer.subarray(pos + 8, pos + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      depth = data[8];
      colorType = data[9];
      interlace = data[12];
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    pos += 12 + len;
  }
  assert(depth === 8 && interlace === 0, `unsupported PNG (depth ${depth}, interlace ${interlace})`);
  const channels = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType];
  assert(channels, `unsupported PNG colour type ${colorType}`);
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const prev = Buffer.alloc(stride);
  const cur = Buffer.alloc(stride);
  const counts = new Map();
  for (let y = 0; y < height; y++) {
    const off = y * (stride + 1);
    const filter = raw[off];
    for (let x = 0; x < stride; x++) {
      const rawByte = raw[off + 1 + x];
      const a = x >= channels ? cur[x - channels] : 0;
      const b = prev[x];
      const c = x >= channels ? prev[x - channels] : 0;
      let v;
      switch (filter) {
        case 0: v = rawByte; break;
        case 1: v = rawByte + a; break;
        case 2: v = rawByte + b; break;
        case 3: v = rawByte + ((a + b) >> 1); break;
        case 4: {
          const p = a + b - c;
          const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
          v = rawByte + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
          break;
        }
        default: throw new Error("bad PNG filter " + filter);
      }
      cur[x] = v & 255;
    }
    for (let x = 0; x < stride; x += channels) {
      let key;
      if (channels >= 3) key = (cur[x] << 16) | (cur[x + 1] << 8) | cur[x + 2];
      else key = cur[x];
      counts.set(key, (counts.get(key) || 0) + 1);
    }
    cur.copy(prev);
  }
  let top = 0;
  for (const n of counts.values()) if (n > top) top = n;
  return { width, height, colors: counts.size, topShare: top / (width * height) };
}

// ------------------------------------------------------------------ browser helpers

const VIEWPORTS = {
  desktop: { width: 1280, height: 800 },
  phone: { width: 390, height: 844 },
};

async function newPage(browser, viewport, name) {
  const context = await browser.newContext({ viewport, deviceScaleFactor: 1, isMobile: viewport.width < 500, hasTouch: viewport.width < 500 });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  onPage = page;
  page.problems = [];
  page.on("pageerror", (e) => page.problems.push(`${name}: page error: ${e.message}`));
  page.on("console", (m) => {
    // A failed request is logged by Chromium too; the page shows those in #error, which
    // is checked on its own. Anything else logged as an error (CSP violations, script
    // errors) is a problem.
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) page.problems.push(`${name}: console: ${m.text()}`);
  });
  return { context, page };
}

async function signIn(page, tokenValue) {
  await page.goto(`${base}/#token=${encodeURIComponent(tokenValue)}`);
  await page.waitForSelector("main[data-view]");
  const left = await page.evaluate(() => location.hash);
  assert(!left.includes("token="), "the token stays in the address bar: " + left);
}

async function go(page, hash, view) {
  const before = await page.evaluate(() => location.hash);
  if (before === hash) {
    await page.evaluate(() => window.dispatchEvent(new HashChangeEvent("hashchange")));
  } else {
    await page.evaluate((h) => { location.hash = h; }, hash);
  }
  await page.waitForFunction(([h, v]) => location.hash === h && document.querySelector(`main[data-view="${v}"]`), [hash, view]);
}

const errorText = (page) => page.$eval("#error", (e) => e.textContent.trim());

// The host's API, called from inside the page with the page's own token.
async function apiFromPage(page, method, apiPath, body) {
  return page.evaluate(async ([m, p, b]) => {
    const headers = { Authorization: "Bearer " + sessionStorage.getItem("jobhost-token") };
    if (b !== null) headers["Content-Type"] = "application/json";
    const r = await fetch(p, { method: m, headers, body: b === null ? undefined : JSON.stringify(b) });
    let data = null;
    try { data = await r.json(); } catch (_) { /* not JSON */ }
    return { status: r.status, data };
  }, [method, apiPath, body === undefined ? null : body]);
}

// ------------------------------------------------------------------ the checks

const enc = encodeURIComponent;
const VIEWS = [
  {
    view: "overview", hash: "#/",
    dom: async (page) => {
      await page.waitForSelector("main svg.chart");
      const text = await page.textContent("main");
      assert(/Runs finished/.test(text), "no runs chart heading");
      return "chart drawn";
    },
  },
  {
    view: "jobs", hash: "#/jobs",
    dom: async (page) => {
      assert(await page.$(`tr[data-job="${expect.job}"]`), `no row for job ${expect.job}`);
      const jobs = await page.$$eval("tr[data-job]", (rows) => rows.map((r) => r.dataset.job));
      const statuses = await page.$$eval("main [data-status]", (b) => [...new Set(b.map((x) => x.dataset.status))]);
      return `${jobs.length} jobs; statuses ${statuses.join(",")}`;
    },
  },
  {
    view: "job", hash: `#/jobs/${enc(expect.job)}`,
    dom: async (page) => {
      const title = await page.textContent("main h1");
      assert(title.includes(expect.job), `title is ${title}`);
      await page.waitForSelector("main svg.chart");
      const runs = await page.$$eval("tr[data-run]", (r) => r.length);
      assert(runs > 0, "no recent runs listed");
      return `${runs} recent runs`;
    },
  },
  {
    view: "runs", hash: "#/runs",
    dom: async (page) => {
      const runs = await page.$$eval("tr[data-run]", (r) => r.map((x) => x.dataset.status));
      assert(runs.length > 0, "no runs listed");
      assert(runs.includes("failed"), "no failed run listed: " + [...new Set(runs)].join(","));
      assert(await page.$("#runs-q"), "no search box");
      return `${runs.length} runs; statuses ${[...new Set(runs)].join(",")}`;
    },
  },
  {
    view: "run", hash: `#/runs/${enc(expect.failed_run)}`,
    dom: async (page) => {
      const text = await page.textContent("main");
      assert(text.includes(expect.failed_run), "the run id is not shown");
      assert(text.includes(expect.job), "the job name is not shown");
      assert(await page.$(".page-title [data-status=failed]"), "no failed badge in the header");
      await page.waitForSelector("main svg.chart");
      assert(await page.$("#run-retry"), "no Retry button on a failed run");
      // The failed attempt kept its journal: the flight recorder's line and its export.
      await page.waitForSelector("main .journal button[data-key^=export-]", { state: "attached" });
      const journal = await page.textContent("main .journal");
      assert(journal.includes("host calls") && journal.includes("host replay"), "no journal line: " + journal);
      return "header, timeline, Retry and the journal's export present";
    },
  },
];

async function viewChecks(browser) {
  for (const [vpName, viewport] of Object.entries(VIEWPORTS)) {
    const { context, page } = await newPage(browser, viewport, vpName);
    try {
      const signed = await check(`${vpName}: sign in with the token in the fragment`, async () => {
        await signIn(page, scenario.token);
        return "token taken from the fragment and dropped";
      });
      if (!signed) continue;
      for (const v of VIEWS) {
        const name = `${v.view}-${vpName}`;
        const shown = await check(`${name}: renders`, async () => {
          await go(page, v.hash, v.view);
          return `main[data-view=${v.view}]`;
        });
        if (!shown) continue;
        await check(`${name}: content`, () => v.dom(page));
        await check(`${name}: no error shown`, async () => {
          const e = await errorText(page);
          assert(e === "", "#error says: " + e);
          return "#error empty";
        });
        await check(`${name}: screenshot is not blank`, async () => {
          // Let charts draw after layout, and relative times settle.
          await page.waitForTimeout(150);
          const file = path.join(out, `${name}.png`);
          const png = await page.screenshot({ path: file, fullPage: true });
          const s = pngStats(png);
          assert(s.colors >= 8, `only ${s.colors} colours`);
          assert(s.topShare < 0.97, `${(s.topShare * 100).toFixed(1)}% of pixels share one colour`);
          return `${file} ${s.width}x${s.height}, ${s.colors} colours, top ${(s.topShare * 100).toFixed(1)}%`;
        });
        if (vpName === "phone") {
          await check(`${name}: fits a phone (no page-wide horizontal scroll)`, async () => {
            const [sw, iw] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
            assert(sw <= iw + 1, `the page is ${sw}px wide in a ${iw}px viewport`);
            return `${sw}px ≤ ${iw}px`;
          });
        }
      }
      await check(`${vpName}: no console errors`, async () => {
        assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
        return "none";
      });
    } finally {
      await context.close();
    }
  }
}

// A guest's log and error hold markup and script: the run view shows them as text, and
// nothing of them runs or renders.
async function hostileChecks(browser) {
  if (!expect.hostile_run) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "hostile");
  try {
    await signIn(page, scenario.token);
    await check("a guest's markup is shown as text", async () => {
      const title = await page.title();
      await go(page, `#/runs/${enc(expect.hostile_run)}`, "run");
      await page.waitForTimeout(500);
      const text = await page.textContent("main");
      assert(text.includes("<b>bold</b>"), "the error's markup is not shown as text");
      assert(text.includes("<script>"), "the log's markup is not shown as text");
      assert(!(await page.$("main b, main img[src=x], main script")), "guest markup became elements");
      assert((await page.title()) === title, `the guest's script ran: title ${await page.title()}`);
      return "shown as text, nothing ran";
    });
  } finally {
    await context.close();
  }
}

// A running run's view shows the attempt it is in: its pass, the time so far, its host
// and the log lines it wrote up to now.
async function liveChecks(browser) {
  if (!expect.live_run) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "live");
  try {
    await signIn(page, scenario.token);
    await check("a running run shows its live attempt and its log so far", async () => {
      await go(page, `#/runs/${enc(expect.live_run)}`, "run");
      await page.waitForSelector("#live-attempt[open] [data-status=running]");
      await page.waitForFunction(() => [...document.querySelectorAll("#live-log li")]
        .some((li) => li.textContent.startsWith("[info] hello, live")), null, { timeout: 10000 });
      const meta = await page.textContent("#live-running");
      assert(/running for .+ · /.test(meta), "the live attempt says " + meta);
      const summary = await page.textContent("#live-attempt summary");
      assert(summary.includes("pass 1 · try 1"), "the live attempt's pass: " + summary);
      return meta;
    });
  } finally {
    await context.close();
  }
}

async function actionChecks(browser) {
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "actions");
  try {
    await signIn(page, scenario.token);

    if (expect.running_run) {
      await check("cancel a running run from its run view", async () => {
        await go(page, `#/runs/${enc(expect.running_run)}`, "run");
        await page.click("#run-cancel");
        await page.waitForSelector("dialog#confirm[open]");
        await page.click("#confirm-yes");
        await page.waitForFunction(() => !document.getElementById("confirm").open);
        await page.waitForSelector(".page-title [data-status=cancelled]");
        const badge = await page.textContent(".page-title [data-status]");
        assert(badge.trim() === "cancelled", "badge says " + badge);
        return `run ${expect.running_run} shows cancelled`;
      });
    }

    if (expect.failed_run) {
      await check("retry a failed run from its run view", async () => {
        await go(page, `#/runs/${enc(expect.failed_run)}`, "run");
        await page.click("#run-retry");
        const prefix = "#/runs/";
        await page.waitForFunction(([old]) => location.hash.startsWith("#/runs/") && location.hash !== old &&
          document.querySelector("main[data-view=run]"), [`${prefix}${enc(expect.failed_run)}`]);
        const newId = decodeURIComponent((await page.evaluate(() => location.hash)).slice(prefix.length));
        const answer = await apiFromPage(page, "GET", `/runs/${enc(newId)}`);
        assert(answer.status === 200, `GET /runs/${newId} answered ${answer.status}`);
        assert(answer.data.retry_of === expect.failed_run, `the new run's retry_of is ${answer.data.retry_of}`);
        await page.waitForSelector(`main a[href="#/runs/${enc(expect.failed_run)}"]`);
        return `retried as ${newId}, which links back`;
      });
    }

    if (expect.job) {
      await check("bulk cancel preview shows the count and Escape changes nothing", async () => {
        const cancelled = async () => {
          const r = await apiFromPage(page, "GET", `/runs?job=${enc(expect.job)}&status=cancelled&limit=200`);
          assert(r.status === 200, "listing cancelled runs answered " + r.status);
          return r.data.runs.length;
        };
        const before = await cancelled();
        await go(page, `#/runs?job=${enc(expect.job)}`, "runs");
        await page.click("#bulk-cancel");
        await page.waitForSelector("dialog#confirm[open] #confirm-count");
        const shown = await page.textContent("#confirm-count");
        const count = await page.getAttribute("#confirm-count", "data-count");
        assert(/\d/.test(shown) && /^\d+$/.test(count || ""), `the dialog shows ${JSON.stringify(shown)}`);
        const preview = await apiFromPage(page, "POST", "/runs/cancel", { filter: { job: expect.job }, confirm: false });
        assert(preview.status === 200 && typeof preview.data.count === "number", "preview answered " + preview.status);
        const focusInside = await page.evaluate(() => document.getElementById("confirm").contains(document.activeElement));
        assert(focusInside, "focus is not inside the dialog");
        await page.keyboard.press("Escape");
        await page.waitForFunction(() => !document.getElementById("confirm").open);
        await page.waitForTimeout(300);
        const after = await cancelled();
        assert(after === before, `cancelled runs went from ${before} to ${after}`);
        return `dialog showed ${count} (preview says ${preview.data.count}); nothing cancelled`;
      });
    }

    await check("keyboard: Tab reaches the nav links, focus is visible, / focuses the runs search", async () => {
      // From a fresh load (the token stays in sessionStorage), as an operator arriving.
      await page.evaluate(() => { location.hash = "#/"; });
      await page.reload();
      await page.waitForSelector("main[data-view=overview]");
      const reached = new Set();
      let outline = "";
      for (let i = 0; i < 12 && reached.size < 3; i++) {
        await page.keyboard.press("Tab");
        const info = await page.evaluate(() => {
          const a = document.activeElement;
          if (!a || !a.dataset || !a.dataset.nav) return null;
          const s = getComputedStyle(a);
          return { nav: a.dataset.nav, outline: s.outlineStyle + " " + s.outlineWidth };
        });
        if (info) { reached.add(info.nav); outline = info.outline; }
      }
      assert(reached.size === 3, "reached only " + [...reached].join(","));
      assert(!/^none/.test(outline) && !/ 0px$/.test(outline), "no visible focus outline: " + outline);
      await page.keyboard.press("/");
      await page.waitForSelector("main[data-view=runs]");
      await page.waitForFunction(() => document.activeElement && document.activeElement.id === "runs-q");
      return `nav links ${[...reached].join(",")}; outline ${outline}; / → #runs-q`;
    });

    await check("actions: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
}

// Start a run with a payload from a job's page: the payload rule's refusal is shown under
// the box and starts nothing; a good payload starts a run that carries it, for an
// operator and for a tenant on its own job.
async function startChecks(browser) {
  if (!expect.start_job) return;
  const starts = [[scenario.token, expect.start_job, "operator"], [scenario.tenant_token, expect.tenant_job, "tenant"]];
  for (const [tokenValue, job, who] of starts) {
    const { context, page } = await newPage(browser, VIEWPORTS.desktop, "start-" + who);
    try {
      await signIn(page, tokenValue);
      const runsOf = async () => {
        const r = await apiFromPage(page, "GET", `/runs?job=${enc(job)}&limit=200`);
        assert(r.status === 200, "listing runs answered " + r.status);
        return r.data.runs.length;
      };
      await check(`start (${who}): a payload the rule refuses is shown inline and starts nothing`, async () => {
        await go(page, `#/jobs/${enc(job)}`, "job");
        const before = await runsOf();
        await page.fill("#start-payload", '{"name": "a", "name": "b"}');
        await page.click("#start-submit");
        await page.waitForFunction(() => /a key given twice/.test(document.getElementById("start-error").textContent));
        const said = await page.textContent("#start-error");
        await page.fill("#start-payload", "{not json");
        await page.click("#start-submit");
        await page.waitForFunction(() => /not JSON/.test(document.getElementById("start-error").textContent));
        await page.waitForTimeout(300);
        const after = await runsOf();
        assert(after === before, `runs of ${job} went from ${before} to ${after}`);
        assert(await page.evaluate(() => location.hash.startsWith("#/jobs/")), "the page left the job");
        return said;
      });
      await check(`start (${who}): a good payload starts a run that carries it`, async () => {
        const name = `${who}-start`;
        await page.fill("#start-payload", JSON.stringify({ name }));
        await page.click("#start-submit");
        await page.waitForFunction(() => location.hash.startsWith("#/runs/") && document.querySelector("main[data-view=run]"));
        const id = decodeURIComponent((await page.evaluate(() => location.hash)).slice("#/runs/".length));
        const r = await apiFromPage(page, "GET", `/runs/${enc(id)}`);
        assert(r.status === 200 && r.data.job === job, `GET /runs/${id}: ${r.status} ${r.data && r.data.job}`);
        assert(r.data.payload && r.data.payload.name === name, "the run's payload is " + JSON.stringify(r.data.payload));
        await page.waitForFunction((n) => document.querySelector("#run-payload").textContent.includes(n), name);
        if (who === "operator") await page.screenshot({ path: path.join(out, "start.png"), fullPage: true });
        page.startedRun = id;
        return `run ${id} with ${JSON.stringify(r.data.payload)}`;
      });
      await check(`payload search (${who}): finds the run it started, not another's; a bad term is refused in words`, async () => {
        const search = async (term) => {
          await go(page, "#/runs", "runs");
          await page.fill("#runs-payload", term);
          await page.click("main form.filters button[type=submit]");
          // The search's own count line, not the list that was there before it.
          await page.waitForFunction(() => location.hash.includes("payload=") && document.querySelector("main[data-view=runs]") &&
            (/with this payload/.test(document.getElementById("runs-count").textContent) || document.getElementById("error").textContent));
          return page.$$eval("tr[data-run]", (r) => r.map((x) => x.dataset.run));
        };
        const own = await search(JSON.stringify({ name: `${who}-start` }));
        assert(own.length === 1 && own[0] === page.startedRun, `found ${own.join(",")}, expected ${page.startedRun}`);
        assert(!(await page.$("#bulk-cancel")), "a bulk control is shown for a payload search");
        // The operator's start came first: the tenant's search must not find it.
        const theirs = who === "tenant" ? await search(JSON.stringify({ name: "operator-start" })) : [];
        assert(theirs.length === 0, `the tenant found ${theirs.join(",")}`);
        await search("[1]");
        await page.waitForFunction(() => /a JSON object/.test(document.getElementById("error").textContent));
        if (who === "operator") await page.screenshot({ path: path.join(out, "search.png"), fullPage: true });
        return `own ${own[0]}`;
      });
      await check(`start (${who}): no console errors`, async () => {
        assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
        return "none";
      });
    } finally {
      await context.close();
    }
  }
}

// The hosts view: this host alive with its lanes and workers; a tenant has no such view.
// The upcoming view: a run started for later and a schedule's next fires, soonest first.
async function fleetChecks(browser) {
  if (!expect.scheduled_job) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "fleet");
  try {
    await signIn(page, scenario.token);
    await check("hosts: this host is alive with its lanes, workers and version", async () => {
      await go(page, "#/hosts", "hosts");
      await page.waitForSelector('tr[data-host][data-state="alive"]');
      const rows = await page.$$eval("tr[data-host]", (r) => r.map((x) => ({ host: x.dataset.host, state: x.dataset.state, text: x.textContent })));
      assert(rows.length === 1, `${rows.length} hosts listed`);
      const api = await apiFromPage(page, "GET", "/hosts");
      const host = api.data.hosts[0];
      assert(host.host === rows[0].host && host.this_host && /^\d+\.\d+\.\d+/.test(host.version), JSON.stringify(host));
      for (const l of host.lanes) assert(rows[0].text.includes(`${l.lane} ${l.busy}/${l.workers}`), `lane ${l.lane} not shown: ${rows[0].text}`);
      assert(host.workers.total === expect.workers, `workers ${JSON.stringify(host.workers)}, expected ${expect.workers}`);
      assert(rows[0].text.includes(host.version), "no version shown: " + rows[0].text);
      await page.screenshot({ path: path.join(out, "hosts.png"), fullPage: true });
      return rows[0].text;
    });
    await check("upcoming: a run started for later and the schedule's fires, soonest first", async () => {
      await go(page, `#/jobs/${enc(expect.start_job)}`, "job");
      await page.fill("#start-payload", JSON.stringify({ name: "later" }));
      await page.fill("#start-delay", "2h");
      await page.click("#start-submit");
      await page.waitForFunction(() => location.hash.startsWith("#/runs/") && document.querySelector("main[data-view=run]"));
      const id = decodeURIComponent((await page.evaluate(() => location.hash)).slice("#/runs/".length));
      await go(page, "#/upcoming", "upcoming");
      await page.waitForSelector(`tr[data-upcoming="run"][data-run="${id}"]`);
      const rows = await page.$$eval("tr[data-upcoming]", (r) => r.map((x) => ({ kind: x.dataset.upcoming, job: x.dataset.job, at: x.querySelector("time").getAttribute("datetime") })));
      const fires = rows.filter((r) => r.kind === "fire" && r.job === expect.scheduled_job);
      assert(fires.length >= 2, `${fires.length} fires of ${expect.scheduled_job}`);
      const times = rows.map((r) => Date.parse(r.at));
      assert(times.every((t, i) => i === 0 || times[i - 1] <= t), "not in time order: " + rows.map((r) => r.at).join(","));
      const text = await page.textContent(`tr[data-run="${id}"]`);
      assert(text.includes("scheduled"), "the run's row says " + text);
      await page.screenshot({ path: path.join(out, "upcoming.png"), fullPage: true });
      page.laterRun = id;
      return `${rows.length} rows; run ${id}; ${fires.length} fires`;
    });
    await check("hosts and upcoming: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
  if (!scenario.tenant_token) return;
  const tenant = await newPage(browser, VIEWPORTS.desktop, "fleet-tenant");
  try {
    await signIn(tenant.page, scenario.tenant_token);
    await check("tenant: no hosts view, and only its own upcoming runs and schedules", async () => {
      const page = tenant.page;
      for (const nav of ["hosts", "tenants", "tokens"]) assert(await page.$eval(`[data-nav="${nav}"]`, (a) => a.hidden), `the ${nav} link is shown to a tenant`);
      const api = await apiFromPage(page, "GET", "/hosts");
      assert(api.status === 404, "GET /hosts answered " + api.status);
      await go(page, "#/upcoming", "upcoming");
      await page.waitForSelector("main table");
      const jobs = await page.$$eval("tr[data-upcoming]", (r) => r.map((x) => x.dataset.job));
      assert(!jobs.includes(expect.start_job) && !jobs.includes(expect.scheduled_job), "another's shown: " + jobs.join(","));
      const e = await errorText(page);
      assert(e === "", "#error says: " + e);
      return `${jobs.length} rows`;
    });
  } finally {
    await tenant.context.close();
  }
}

// The tenants view (add with the name rule's refusal inline, disable after a confirmation,
// enable, quota use) and a job's settings from its manifest entry.
async function tenantsAndSettingsChecks(browser) {
  if (!expect.settings_job) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "tenants");
  try {
    await signIn(page, scenario.token);
    await check("tenants: a bad name is refused inline; add, disable and enable one", async () => {
      await go(page, "#/tenants", "tenants");
      await page.waitForSelector(`tr[data-tenant="${expect.tenant}"]`);
      const before = await page.$$eval("tr[data-tenant]", (r) => r.length);
      await page.fill("#tenant-name", "Not A Name");
      await page.click("#tenant-form button[type=submit]");
      await page.waitForFunction(() => document.getElementById("tenant-error").textContent.trim() !== "");
      const said = await page.textContent("#tenant-error");
      assert((await page.$$eval("tr[data-tenant]", (r) => r.length)) === before, "a row was added for a bad name");
      await page.fill("#tenant-name", "initech");
      await page.click("#tenant-form button[type=submit]");
      await page.waitForSelector('tr[data-tenant="initech"][data-active="true"]');
      await page.click('button[data-key="disable:initech"]');
      await page.waitForSelector("#confirm[open]");
      await page.click("#confirm-yes");
      await page.waitForSelector('tr[data-tenant="initech"][data-active="false"]');
      await page.click('button[data-key="enable:initech"]');
      await page.waitForSelector('tr[data-tenant="initech"][data-active="true"]');
      const attempts = await page.$eval(`tr[data-tenant="${expect.tenant}"] td:nth-child(3)`, (c) => Number(c.textContent.replace(/\D/g, "")));
      assert(attempts >= 1, `${expect.tenant}'s attempts in the last hour: ${attempts}`);
      await page.screenshot({ path: path.join(out, "tenants.png"), fullPage: true });
      return `refused: ${said}; ${expect.tenant} used ${attempts} attempts`;
    });
    await check("job settings: the manifest's timeout, retries, grants and lane, read-only", async () => {
      await go(page, `#/jobs/${enc(expect.settings_job)}`, "job");
      await page.waitForSelector("[data-setting=timeout]");
      const setting = (k) => page.textContent(`[data-setting=${k}]`);
      const api = await apiFromPage(page, "GET", `/jobs/${enc(expect.settings_job)}`);
      // The manifest says 60s; the definition keeps it in its largest exact unit.
      assert(api.data.settings.limits.timeout === "1m", "the API's timeout: " + JSON.stringify(api.data.settings));
      assert((await setting("timeout")).trim() === "1m", "timeout: " + (await setting("timeout")));
      const retries = String(api.data.settings.retry.retries);
      assert((await setting("retries")).trim().startsWith(retries), `retries: ${await setting("retries")}, the API says ${retries}`);
      assert((await setting("grants")).includes("ledger"), "grants: " + (await setting("grants")));
      assert((await setting("lane")).trim() === "default", "lane: " + (await setting("lane")));
      assert(!(await page.$("#job-settings input, #job-settings button")), "a setting can be changed");
      await page.screenshot({ path: path.join(out, "settings.png"), fullPage: true });
      return `timeout 1m, retries ${retries}, grants ledger, lane default`;
    });
    await check("tenants and settings: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
}

// Reports: failures over time by code (drawn) and the reports the host wrote, filtered by
// kind; a tenant sees none of the operator's.
async function reportChecks(browser) {
  if (!expect.failed_run) return;
  for (const [tokenValue, who] of [[scenario.token, "operator"], [scenario.tenant_token, "tenant"]]) {
    const { context, page } = await newPage(browser, VIEWPORTS.desktop, "reports-" + who);
    try {
      await signIn(page, tokenValue);
      await check(`reports (${who}): failures by code are drawn; reports filter by kind`, async () => {
        await go(page, "#/reports", "reports");
        await page.waitForSelector("#failures-chart svg.chart, #failures-chart .chart-empty, #failures-chart svg");
        const codes = await page.getAttribute("#failures-chart", "data-codes");
        const api = await apiFromPage(page, "GET", "/failures?window=day");
        assert(api.status === 200 && codes === api.data.codes.join(","), `chart codes ${codes}, API ${JSON.stringify(api.data && api.data.codes)}`);
        const rows = await page.$$eval("tr[data-report]", (r) => r.map((x) => ({ kind: x.dataset.kind, text: x.textContent })));
        if (who === "tenant") {
          assert(codes === "", "the tenant's chart shows codes " + codes);
          assert(!rows.some((x) => x.text.includes(expect.job)), "the tenant sees the operator's reports");
          return `${rows.length} reports`;
        }
        const failed = await apiFromPage(page, "GET", `/runs/${enc(expect.failed_run)}`);
        assert(codes.split(",").includes(failed.data.code), `the failed run's code ${failed.data.code} is not in ${codes}`);
        assert(rows.some((x) => x.text.includes(expect.job)), "no report of " + expect.job + ": " + rows.map((x) => x.kind).join(","));
        const kind = rows.find((x) => x.text.includes(expect.job)).kind;
        await go(page, `#/reports?kind=${kind}`, "reports");
        const kinds = await page.$$eval("tr[data-report]", (r) => [...new Set(r.map((x) => x.dataset.kind))]);
        assert(kinds.length === 1 && kinds[0] === kind, "filtered kinds: " + kinds.join(","));
        await page.screenshot({ path: path.join(out, "reports.png"), fullPage: true });
        return `codes ${codes}; ${rows.length} reports; kind ${kind}`;
      });
      await check(`reports (${who}): no error shown, no console errors`, async () => {
        const e = await errorText(page);
        assert(e === "", "#error says: " + e);
        assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
        return "none";
      });
    } finally {
      await context.close();
    }
  }
}

// Purge by filter: the preview says how many, Escape deletes nothing, confirming deletes
// them (the run is gone); a tenant is shown no purge and the API does not have it for it.
async function purgeChecks(browser) {
  if (!expect.purge_job) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "purge");
  try {
    await signIn(page, scenario.token);
    await check("purge: the preview counts the ended runs; Escape keeps them, confirming deletes them", async () => {
      const filter = { job: expect.purge_job };
      const runsNow = async () => (await apiFromPage(page, "GET", `/runs?job=${enc(expect.purge_job)}`)).data.runs.map((r) => r.run_id);
      const before = await runsNow();
      assert(before.includes(expect.hostile_run), `${expect.hostile_run} is not among ${before.join(",")}`);
      await go(page, `#/runs?job=${enc(expect.purge_job)}`, "runs");
      await page.click("#bulk-purge");
      await page.waitForSelector("dialog#confirm[open] #confirm-count");
      const count = Number(await page.getAttribute("#confirm-count", "data-count"));
      const preview = await apiFromPage(page, "POST", "/runs/purge", { filter, confirm: false });
      assert(preview.status === 200 && preview.data.count === count && count === before.length, `dialog ${count}, preview ${JSON.stringify(preview.data)}, runs ${before.length}`);
      await page.keyboard.press("Escape");
      await page.waitForFunction(() => !document.getElementById("confirm").open);
      await page.waitForTimeout(300);
      assert((await runsNow()).length === before.length, "runs went before the purge was confirmed");
      await page.click("#bulk-purge");
      await page.waitForSelector("dialog#confirm[open] #confirm-count");
      await page.click("#confirm-yes");
      await page.waitForFunction(() => /purged \d+ runs/.test(document.getElementById("notice").textContent));
      const after = await runsNow();
      assert(after.length === 0, "left: " + after.join(","));
      const gone = await apiFromPage(page, "GET", `/runs/${enc(expect.hostile_run)}`);
      assert(gone.status === 404, `the purged run answers ${gone.status}`);
      return `${count} purged`;
    });
    await check("purge: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
  if (!scenario.tenant_token) return;
  const tenant = await newPage(browser, VIEWPORTS.desktop, "purge-tenant");
  try {
    await signIn(tenant.page, scenario.tenant_token);
    await check("purge (tenant): no purge shown; the API answers 404", async () => {
      await go(tenant.page, "#/runs", "runs");
      assert(!(await tenant.page.$("#bulk-purge")), "a purge control is shown to a tenant");
      const r = await apiFromPage(tenant.page, "POST", "/runs/purge", { filter: {}, confirm: false });
      assert(r.status === 404, "POST /runs/purge answered " + r.status);
      return "404";
    });
  } finally {
    await tenant.context.close();
  }
}

// Another tenant's job or run is, to a tenant, a plain not-found page: no skeleton, no
// buttons, no lane. Paused runs are not lag: the overview shows them apart.
async function notFoundAndLagChecks(browser) {
  if (!expect.paused_job) return;
  const tenant = await newPage(browser, VIEWPORTS.desktop, "not-found");
  try {
    await signIn(tenant.page, scenario.tenant_token);
    for (const [hash, what] of [[`#/jobs/${enc(expect.hidden_from_tenant)}`, "job"], [`#/runs/${enc(expect.failed_run)}`, "run"]]) {
      await check(`tenant: another tenant's ${what} is a plain not-found page`, async () => {
        const page = tenant.page;
        await go(page, hash, "notfound");
        const text = await page.textContent("main");
        assert(/Not found/.test(text) && (await page.$("#not-found")), "no not-found page: " + text);
        const buttons = await page.$$eval("main button", (b) => b.map((x) => x.textContent.trim()));
        assert(buttons.length === 0, "buttons shown: " + buttons.join(","));
        assert(!(await page.$("main .card, main table, main svg")), "a skeleton of the view is shown");
        assert(!/\blane\b|Kick|Cancel/i.test(text), "the page says: " + text);
        const e = await errorText(page);
        assert(e === "", "#error says: " + e);
        if (what === "job") await page.screenshot({ path: path.join(out, "not-found-tenant.png"), fullPage: true });
        return text.trim().slice(0, 120);
      });
    }
  } finally {
    await tenant.context.close();
  }
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "lag");
  try {
    await signIn(page, scenario.token);
    await check("overview: a paused job's due run is shown apart, not as lag", async () => {
      const ov = await apiFromPage(page, "GET", "/overview?window=hour");
      const lane = ov.data.lanes.find((l) => l.lane === "default");
      assert(lane && lane.paused_depth >= 1 && lane.paused_lag_ms > 0, "lane: " + JSON.stringify(lane));
      assert(lane.lag_ms < lane.paused_lag_ms, `lag ${lane.lag_ms} counts the paused run (${lane.paused_lag_ms})`);
      await go(page, "#/", "overview");
      await page.waitForSelector('[data-paused="default"]');
      const shown = await page.textContent('[data-paused="default"]');
      assert(/paused/.test(shown), "the lane says " + shown);
      return `lag ${lane.lag_ms} ms; paused ${lane.paused_depth} (${lane.paused_lag_ms} ms)`;
    });
  } finally {
    await context.close();
  }
}

// A run whose attempt journaled thousands of host calls: its page stays short, the calls
// grouped by capability and paged.
async function manyCallsChecks(browser) {
  if (!expect.chatty_run) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "many-calls");
  try {
    await signIn(page, scenario.token);
    await check("a run with thousands of journaled calls stays readable: grouped and paged", async () => {
      await go(page, `#/runs/${enc(expect.chatty_run)}`, "run");
      await page.waitForSelector("[data-calls] tr[data-kind]");
      const api = await apiFromPage(page, "GET", `/runs/${enc(expect.chatty_run)}/attempts/1/calls`);
      assert(api.status === 200 && api.data.calls.length >= 2000, `the journal lists ${api.data && api.data.calls.length} calls`);
      const db = await page.$eval('[data-calls] tr[data-kind="db"] td:nth-child(2)', (c) => Number(c.textContent.replace(/\D/g, "")));
      const dbCalls = api.data.calls.filter((c) => String(c.call).startsWith("db.")).length;
      assert(db === dbCalls, `the summary says ${db} db calls, the journal ${dbCalls}`);
      const rows = await page.$$eval("[data-calls] tr[data-call]", (r) => r.length);
      assert(rows === 50, `${rows} calls on the first page`);
      const height = await page.evaluate(() => document.documentElement.scrollHeight);
      assert(height < 5000, `the page is ${height}px tall`);
      const first = await page.textContent("[data-calls] .calls-page");
      await page.click("[data-calls] button[data-key^=calls-next]");
      await page.waitForFunction((f) => document.querySelector("[data-calls] .calls-page").textContent !== f, first);
      const second = await page.textContent("[data-calls] .calls-page");
      assert(/^calls 51–100 of/.test(second), "the second page says " + second);
      await page.click('[data-calls] tr[data-kind="db"] button');
      await page.waitForFunction(() => / db$/.test(document.querySelector("[data-calls] .calls-page").textContent));
      const kinds = await page.$$eval("[data-calls] tr[data-call] td:nth-child(2)", (c) => [...new Set(c.map((x) => x.textContent))]);
      assert(kinds.length === 1 && kinds[0] === "db", "kinds shown: " + kinds.join(","));
      await page.screenshot({ path: path.join(out, "many-calls.png"), fullPage: true });
      return `${api.data.calls.length} calls; page ${height}px; ${first} → ${second}`;
    });
    await check("many calls: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
}

async function tenantChecks(browser) {
  if (!scenario.tenant_token) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "tenant");
  try {
    await check("tenant: sees its jobs only, and no pause buttons", async () => {
      await signIn(page, scenario.tenant_token);
      await go(page, "#/jobs", "jobs");
      const jobs = await page.$$eval("tr[data-job]", (rows) => rows.map((r) => r.dataset.job));
      if (expect.tenant_job) assert(jobs.includes(expect.tenant_job), `${expect.tenant_job} is missing: ${jobs.join(",")}`);
      if (expect.hidden_from_tenant) assert(!jobs.includes(expect.hidden_from_tenant), `${expect.hidden_from_tenant} is shown to the tenant`);
      const pauseButtons = await page.$$eval("main button", (b) => b.filter((x) => /^(Pause|Resume)\b/.test(x.textContent.trim())).length);
      assert(pauseButtons === 0, `${pauseButtons} pause buttons shown`);
      const e = await errorText(page);
      assert(e === "", "#error says: " + e);
      await page.screenshot({ path: path.join(out, "jobs-tenant.png"), fullPage: true });
      return `jobs: ${jobs.join(",")}`;
    });
  } finally {
    await context.close();
  }
}

// The tokens and audit views as an operator: create a read-only token with an expiry and
// a label full of markup, see it listed (the markup as text), revoke it, and find both
// changes in the audit log.
async function tokenAndAuditChecks(browser) {
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "tokens");
  const label = "<b>on-call</b> \u202e";
  try {
    await signIn(page, scenario.token);
    await check("tokens: create a read-only token with an expiry, shown once", async () => {
      await go(page, "#/tokens", "tokens");
      await page.selectOption("#token-kind", "read_only");
      await page.fill("#token-label", label);
      await page.fill("#token-expires", "30d");
      await page.click("#token-form button[type=submit]");
      await page.waitForSelector("#token-secret");
      const secret = (await page.textContent("#token-secret")).trim();
      assert(/^jh_[0-9a-f]{12}_[0-9a-f]{64}$/.test(secret), "not a token: " + secret);
      const id = secret.slice(3, 15);
      await page.waitForSelector(`tr[data-token="${id}"]`);
      const row = await page.$eval(`tr[data-token="${id}"]`, (r) => ({ text: r.textContent, bold: r.querySelectorAll("b").length }));
      assert(row.text.includes("<b>on-call</b>") && row.bold === 0, "the label is not shown as text: " + row.text);
      assert(row.text.includes("read-only") && row.text.includes("expires"), "kind or expiry missing: " + row.text);
      page.tokenId = id;
      return "token " + id;
    });
    await check("tokens: a bad expiry is refused in words naming the units", async () => {
      await page.fill("#token-expires", "2 weeks");
      await page.click("#token-form button[type=submit]");
      await page.waitForFunction(() => /m \(minutes\), h \(hours\) or d \(days\)/.test(document.getElementById("error").textContent));
      await page.fill("#token-expires", "");
      return await errorText(page);
    });
    await check("tokens: revoke it after a confirmation", async () => {
      const id = page.tokenId;
      await page.click(`tr[data-token="${id}"] button[data-key="revoke:${id}"]`);
      await page.waitForSelector("#confirm[open]");
      await page.click("#confirm-yes");
      await page.waitForFunction((i) => {
        const r = document.querySelector(`tr[data-token="${i}"]`);
        return r && /revoked/.test(r.textContent) && !r.querySelector("button");
      }, id);
      await page.screenshot({ path: path.join(out, "tokens.png"), fullPage: true });
      return "revoked";
    });
    await check("audit: the console's changes are listed, and filtered by action", async () => {
      await go(page, "#/audit", "audit");
      await page.waitForSelector("tr[data-audit]");
      const actions = await page.$$eval("tr[data-audit] td:nth-child(3)", (c) => c.map((x) => x.textContent));
      for (const a of ["token.create", "token.revoke", "run.cancel", "run.retry"]) assert(actions.includes(a), `${a} missing: ${actions.join(",")}`);
      await page.fill("#audit-action", "token.revoke");
      await page.click("main form button[type=submit]");
      await page.waitForFunction(() => location.hash.includes("action=token.revoke") && document.querySelector("main[data-view=audit]"));
      await page.waitForFunction(() => {
        const cells = [...document.querySelectorAll("tr[data-audit] td:nth-child(3)")].map((x) => x.textContent);
        return cells.length > 0 && cells.every((c) => c === "token.revoke");
      });
      await page.screenshot({ path: path.join(out, "audit.png"), fullPage: true });
      return `${actions.length} rows`;
    });
    await check("tokens and audit: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
}

// A read-only token: every view, no control that changes anything; the API refuses it.
async function readOnlyChecks(browser) {
  if (!scenario.read_only_token) return;
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "read-only");
  const changing = (p) => p.$$eval("main button, main form#token-form", (b) =>
    b.filter((x) => x.tagName === "FORM" || /^(Kick|Pause|Resume|Cancel|Retry|Revoke|Create token|Start run|Add tenant|Disable|Enable|Purge)\b/.test(x.textContent.trim())).map((x) => x.textContent.trim() || x.id));
  try {
    await signIn(page, scenario.read_only_token);
    for (const [hash, view] of [["#/", "overview"], ["#/jobs", "jobs"], [`#/jobs/${enc(expect.job)}`, "job"], ["#/runs", "runs"],
      [`#/runs/${enc(expect.failed_run)}`, "run"], ["#/tokens", "tokens"], ["#/audit", "audit"], ["#/hosts", "hosts"],
      ["#/upcoming", "upcoming"], ["#/tenants", "tenants"], ["#/reports", "reports"]]) {
      await check(`read-only: ${view} shows no control that changes anything`, async () => {
        await go(page, hash, view);
        const shown = await changing(page);
        assert(shown.length === 0, "shown: " + shown.join(", "));
        assert(!(await page.$("#bulk-cancel")) && !(await page.$("#run-retry")), "a bulk or retry control is shown");
        assert(!(await page.$("#start-form")), "the start form is shown");
        const e = await errorText(page);
        assert(e === "", "#error says: " + e);
        if (view === "jobs") await page.screenshot({ path: path.join(out, "jobs-read-only.png"), fullPage: true });
        return "none";
      });
    }
    await check("read-only: sees the tokens and the audit log", async () => {
      await go(page, "#/tokens", "tokens");
      const tokens = await page.$$eval("tr[data-token]", (r) => r.length);
      assert(tokens >= 2, `${tokens} tokens listed`);
      await go(page, "#/audit", "audit");
      const rows = await page.$$eval("tr[data-audit]", (r) => r.length);
      assert(rows > 0, "no audit rows");
      return `${tokens} tokens, ${rows} audit rows`;
    });
    await check("read-only: the API refuses a change with 403 read_only", async () => {
      const r = await apiFromPage(page, "POST", `/jobs/${enc(expect.job)}/kick`);
      assert(r.status === 403 && r.data && r.data.error.code === "read_only", JSON.stringify(r));
      return "403";
    });
    await check("read-only: no console errors", async () => {
      assert(page.problems.length === 0, page.problems.slice(0, 3).join(" | "));
      return "none";
    });
  } finally {
    await context.close();
  }
}

async function signedOutChecks(browser) {
  const { context, page } = await newPage(browser, VIEWPORTS.desktop, "signed-out");
  try {
    await check("without a token: the sign-in form and nothing else", async () => {
      await page.goto(`${base}/`);
      await page.waitForSelector("form#signin:not([hidden])");
      const inMain = await page.$$eval("main *", (n) => n.length);
      assert(inMain === 0, `main has ${inMain} elements`);
      assert(!(await page.$("[data-job]")), "jobs shown without a token");
      return "sign-in form shown";
    });
  } finally {
    await context.close();
  }
}

let browser;
let exitCode = 0;
try {
  browser = await chromium.launch({
    executablePath: scenario.chromium || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  await viewChecks(browser);
  await hostileChecks(browser);
  await liveChecks(browser);
  await actionChecks(browser);
  await tenantChecks(browser);
  await startChecks(browser);
  await fleetChecks(browser);
  await tenantsAndSettingsChecks(browser);
  await reportChecks(browser);
  await purgeChecks(browser);
  await notFoundAndLagChecks(browser);
  await manyCallsChecks(browser);
  await tokenAndAuditChecks(browser);
  await readOnlyChecks(browser);
  await signedOutChecks(browser);
} catch (e) {
  report("driver", false, e && e.stack ? e.stack.split("\n").slice(0, 3).join(" ") : String(e));
} finally {
  if (browser) await browser.close().catch(() => {});
  const failed = results.filter((r) => !r.ok).map((r) => r.check);
  console.log(JSON.stringify({ summary: { checks: results.length, passed: results.length - failed.length, failed: failed.length, failures: failed, screenshots: out } }));
  exitCode = failed.length ? 1 : 0;
}
process.exit(exitCode);
