// jobhost console charts: hand-drawn SVG.
//
// Why not a chart library: the console draws three kinds of chart (stacked bars, lines,
// a timeline) over data the server has already bucketed — at most a few hundred points.
// That is a few hundred lines of SVG building, with no dependency to vendor, audit or
// update, nothing fetched from elsewhere (the page runs under a strict CSP), output that
// scales with `viewBox`, and colours that come from the console's CSS (pass
// `var(--…)` strings), so themes and dark mode apply to charts too. Every chart is an
// `<svg role="img">` with an `aria-label` summary and `<title>` tooltips on its marks.
//
// API (all replace the container's content):
//   Charts.stackedBars(container, {buckets, keys, colors, labels?, bucketMs?, empty?})
//   Charts.lines(container, {points, series:[{key,label,color,axis?}], format?, formatRight?, empty?, range?})
//   Charts.timeline(container, {start, end, spans:[{from,to,status,label}], ticks:[{at,label,kind?}]})
"use strict";

(function () {
  const NS = "http://www.w3.org/2000/svg";

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function title(node, text) {
    node.append(svgEl("title", {}, text));
    return node;
  }

  // Colours are applied through the CSSOM (allowed by a strict CSP) so `var(--x)` works.
  function paint(node, prop, color) {
    if (color) node.style.setProperty(prop, color);
    return node;
  }

  function ms(t) {
    if (t === null || t === undefined) return NaN;
    if (typeof t === "number") return t;
    return Date.parse(t);
  }

  function pad(n) { return String(n).padStart(2, "0"); }

  // A time label whose precision fits the span shown.
  function timeLabel(t, span) {
    const d = new Date(t);
    const hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (span > 2 * 86400e3) return d.toLocaleDateString(undefined, { weekday: "short" }) + " " + hm;
    if (span < 5 * 60e3) return hm + ":" + pad(d.getSeconds());
    return hm;
  }

  function fullTime(t) {
    const d = new Date(t);
    return isNaN(d) ? "" : d.toLocaleString();
  }

  // A "nice" ceiling for an axis maximum: 1, 2, 2.5, 5 × 10^n.
  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function compact(n) {
    if (n === null || n === undefined || isNaN(n)) return "—";
    const a = Math.abs(n);
    if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 0 : 1).replace(/\.0$/, "") + "M";
    if (a >= 1e3) return (n / 1e3).toFixed(a >= 1e4 ? 0 : 1).replace(/\.0$/, "") + "k";
    return String(Math.round(n * 100) / 100);
  }

  function durationLabel(v) {
    if (v === null || v === undefined || isNaN(v)) return "—";
    // Under 10 ms a fraction stays (axis marks at half a small maximum, ticks of a
    // run that took a few milliseconds): "2.5 ms", not a second "3 ms".
    if (v < 10 && v !== Math.round(v)) return (Math.round(v * 10) / 10) + " ms";
    if (v < 1000) return Math.round(v) + " ms";
    if (v < 60e3) return (v / 1000).toFixed(v < 10e3 ? 1 : 0) + " s";
    if (v < 3600e3) {
      const m = Math.floor(v / 60e3);
      const s = Math.round((v % 60e3) / 1000);
      return s && m < 10 ? `${m}m ${s}s` : `${m + (s >= 30 && m >= 10 ? 1 : 0)}m`;
    }
    return (v / 3600e3).toFixed(1) + " h";
  }

  // The drawing width: the container's own width (so text is drawn at 1:1 and stays
  // legible on a phone), then `viewBox` scales it if the container resizes later.
  function widthOf(container, fallback) {
    const w = Math.round(container.clientWidth || 0);
    return Math.max(280, w || fallback || 640);
  }

  function frame(container, height, label, fallbackWidth) {
    const width = widthOf(container, fallbackWidth);
    const svg = svgEl("svg", {
      viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label,
      class: "chart", preserveAspectRatio: "xMidYMid meet",
    });
    return { svg, width, height };
  }

  function legend(items) {
    const ul = document.createElement("ul");
    ul.className = "chart-legend";
    for (const it of items) {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "swatch" + (it.line ? " swatch-line" : "");
      sw.style.setProperty("background", it.color);
      li.append(sw, document.createTextNode(it.label));
      if (it.value !== undefined) {
        const v = document.createElement("b");
        v.textContent = it.value;
        li.append(v);
      }
      ul.append(li);
    }
    return ul;
  }

  function emptyFrame(container, height, text) {
    const { svg, width } = frame(container, height, text);
    svg.append(svgEl("rect", { x: 0.5, y: 0.5, width: width - 1, height: height - 1, rx: 4, class: "chart-frame" }));
    svg.append(svgEl("text", { x: width / 2, y: height / 2 + 4, "text-anchor": "middle", class: "chart-empty" }, text));
    container.replaceChildren(svg);
    return svg;
  }

  // Plot area margins.
  const M = { top: 10, right: 12, bottom: 22, left: 40 };

  function yAxis(svg, plot, max, format, side) {
    const g = svgEl("g", { class: "chart-axis" });
    const x = side === "right" ? plot.x + plot.w : plot.x;
    const anchor = side === "right" ? "start" : "end";
    const dx = side === "right" ? 4 : -4;
    for (const frac of [0, 0.5, 1]) {
      const y = plot.y + plot.h - frac * plot.h;
      if (side !== "right") {
        g.append(svgEl("line", { x1: plot.x, x2: plot.x + plot.w, y1: y, y2: y, class: frac === 0 ? "chart-base" : "chart-grid" }));
      }
      if (frac > 0) g.append(svgEl("text", { x: x + dx, y: y + 4, "text-anchor": anchor }, format(max * frac)));
    }
    svg.append(g);
  }

  function xLabels(svg, plot, t0, t1, xOf) {
    const span = t1 - t0;
    const g = svgEl("g", { class: "chart-axis" });
    const n = Math.max(2, Math.min(6, Math.floor(plot.w / 90)));
    for (let i = 0; i <= n; i++) {
      const t = t0 + (span * i) / n;
      const x = xOf(t);
      const anchor = i === 0 ? "start" : i === n ? "end" : "middle";
      g.append(svgEl("line", { x1: x, x2: x, y1: plot.y + plot.h, y2: plot.y + plot.h + 3, class: "chart-base" }));
      g.append(svgEl("text", { x, y: plot.y + plot.h + 15, "text-anchor": anchor }, timeLabel(t, span)));
    }
    svg.append(g);
  }

  // Stacked bars: one bar per bucket, one segment per key.
  function stackedBars(container, opts) {
    const buckets = (opts && opts.buckets) || [];
    const keys = (opts && opts.keys) || [];
    const colors = (opts && opts.colors) || {};
    const labels = (opts && opts.labels) || {};
    const height = (opts && opts.height) || 180;
    const emptyText = (opts && opts.empty) || "no runs in this window";
    const totals = buckets.map((b) => keys.reduce((s, k) => s + (Number(b[k]) || 0), 0));
    const grand = totals.reduce((a, b) => a + b, 0);
    const sums = {};
    for (const k of keys) sums[k] = buckets.reduce((s, b) => s + (Number(b[k]) || 0), 0);
    const legendEl = legend(keys.map((k) => ({ label: labels[k] || k, color: colors[k], value: compact(sums[k]) })));
    if (!buckets.length || grand === 0) {
      emptyFrame(container, height, emptyText);
      container.append(legendEl);
      return;
    }
    const summary = `Stacked bar chart, ${buckets.length} buckets, ${grand} runs: ` +
      keys.map((k) => `${sums[k]} ${labels[k] || k}`).join(", ");
    const { svg, width } = frame(container, height, summary);
    const plot = { x: M.left, y: M.top, w: width - M.left - M.right, h: height - M.top - M.bottom };
    const max = niceMax(Math.max(...totals));
    yAxis(svg, plot, max, compact);
    const times = buckets.map((b) => ms(b.t));
    const step = opts.bucketMs || (times.length > 1 ? times[1] - times[0] : 60e3);
    const t0 = times[0];
    const t1 = times[times.length - 1] + step;
    const slot = plot.w / buckets.length;
    const gap = slot > 6 ? Math.min(2, slot * 0.2) : 0;
    const bars = svgEl("g", { class: "chart-bars" });
    buckets.forEach((b, i) => {
      const x = plot.x + i * slot + gap / 2;
      let y = plot.y + plot.h;
      const g = svgEl("g", {});
      const parts = [];
      for (const k of keys) {
        const v = Number(b[k]) || 0;
        if (!v) continue;
        const h = (v / max) * plot.h;
        y -= h;
        g.append(paint(svgEl("rect", { x, y, width: Math.max(0.5, slot - gap), height: h }), "fill", colors[k]));
        parts.push(`${labels[k] || k} ${v}`);
      }
      // A full-height hit area so a tooltip is there even over a short bar.
      const hit = svgEl("rect", { x: plot.x + i * slot, y: plot.y, width: slot, height: plot.h, class: "chart-hit" });
      title(hit, `${fullTime(times[i])}\n${totals[i]} runs${parts.length ? "\n" + parts.join("\n") : ""}`);
      g.append(hit);
      bars.append(g);
    });
    svg.append(bars);
    xLabels(svg, plot, t0, t1, (t) => plot.x + ((t - t0) / (t1 - t0)) * plot.w);
    container.replaceChildren(svg, legendEl);
  }

  // Line chart over time; a series with `axis: "right"` gets its own scale on the right.
  function lines(container, opts) {
    const points = ((opts && opts.points) || []).filter((p) => !isNaN(ms(p.t)));
    const series = (opts && opts.series) || [];
    const height = (opts && opts.height) || 160;
    const format = (opts && opts.format) || compact;
    const formatRight = (opts && opts.formatRight) || format;
    const emptyText = (opts && opts.empty) || "no runs in this window";
    const has = (p, s) => p[s.key] !== null && p[s.key] !== undefined && !isNaN(Number(p[s.key]));
    const anyValue = points.some((p) => series.some((s) => has(p, s)));
    const legendEl = legend(series.map((s) => ({ label: s.label || s.key, color: s.color, line: true })));
    if (!points.length || !anyValue) {
      emptyFrame(container, height, emptyText);
      container.append(legendEl);
      return;
    }
    const right = series.some((s) => s.axis === "right");
    const left = series.filter((s) => s.axis !== "right");
    const rightS = series.filter((s) => s.axis === "right");
    const maxOf = (ss) => niceMax(Math.max(0, ...points.flatMap((p) => ss.filter((s) => has(p, s)).map((s) => Number(p[s.key])))));
    const maxL = maxOf(left);
    const maxR = maxOf(rightS);
    const summary = `Line chart, ${points.length} points: ` + series.map((s) => {
      const vals = points.filter((p) => has(p, s)).map((p) => Number(p[s.key]));
      const f = s.axis === "right" ? formatRight : format;
      return `${s.label || s.key} max ${vals.length ? f(Math.max(...vals)) : "—"}`;
    }).join(", ");
    const { svg, width } = frame(container, height, summary);
    const plot = { x: M.left + 8, y: M.top, w: width - M.left - 8 - (right ? 48 : M.right), h: height - M.top - M.bottom };
    yAxis(svg, plot, maxL, format);
    if (right) yAxis(svg, plot, maxR, formatRight, "right");
    const times = points.map((p) => ms(p.t));
    // `range` ([from, to], optional) widens the time axis to a whole window.
    const range = (opts && Array.isArray(opts.range) ? opts.range : []).map(ms).filter((t) => !isNaN(t));
    let t0 = Math.min(...times, ...range);
    let t1 = Math.max(...times, ...range);
    if (t1 === t0) { t0 -= 30e3; t1 += 30e3; }
    const xOf = (t) => plot.x + ((t - t0) / (t1 - t0)) * plot.w;
    const yOf = (v, s) => plot.y + plot.h - (Number(v) / (s.axis === "right" ? maxR : maxL)) * plot.h;
    const dots = points.length <= 240;
    for (const s of series) {
      const g = svgEl("g", { class: "chart-series" });
      let d = "";
      let pen = false;
      points.forEach((p, i) => {
        if (!has(p, s)) { pen = false; return; }
        d += (pen ? "L" : "M") + xOf(times[i]).toFixed(1) + " " + yOf(p[s.key], s).toFixed(1);
        pen = true;
      });
      g.append(paint(svgEl("path", { d, class: "chart-line" }), "stroke", s.color));
      if (dots) {
        const f = s.axis === "right" ? formatRight : format;
        points.forEach((p, i) => {
          if (!has(p, s)) return;
          // A point with no neighbour draws no line: its dot is all there is to see.
          const lone = !(i > 0 && has(points[i - 1], s)) && !(i + 1 < points.length && has(points[i + 1], s));
          const c = paint(svgEl("circle", { cx: xOf(times[i]), cy: yOf(p[s.key], s), r: lone ? 3 : 2.2, class: "chart-dot" + (lone ? " lone" : "") }), "fill", s.color);
          title(c, `${fullTime(times[i])}\n${s.label || s.key}: ${f(Number(p[s.key]))}`);
          g.append(c);
        });
      }
      svg.append(g);
    }
    xLabels(svg, plot, t0, t1, xOf);
    container.replaceChildren(svg, legendEl);
  }

  // A run's life: one bar per attempt from start to end, with marks (queued, claims) and
  // host-call ticks under them.
  function timeline(container, opts) {
    const spans = ((opts && opts.spans) || []).filter((s) => !isNaN(ms(s.from)));
    const ticks = ((opts && opts.ticks) || []).filter((t) => !isNaN(ms(t.at)));
    const colorOf = (opts && opts.colorOf) || ((st) => `var(--st-${st}, var(--muted))`);
    let start = ms(opts && opts.start);
    let end = ms(opts && opts.end);
    const all = [...spans.flatMap((s) => [ms(s.from), ms(s.to)]), ...ticks.map((t) => ms(t.at))].filter((v) => !isNaN(v));
    // The frame covers everything drawn, even if the given start/end disagree with it.
    if (all.length) {
      start = isNaN(start) ? Math.min(...all) : Math.min(start, ...all);
      end = isNaN(end) ? Math.max(...all) : Math.max(end, ...all);
    }
    const rowH = 18;
    const calls = ticks.filter((t) => t.kind === "call");
    const marks = ticks.filter((t) => t.kind !== "call");
    const height = M.top + spans.length * (rowH + 6) + (calls.length ? 18 : 0) + 14 + M.bottom;
    if (isNaN(start) || isNaN(end) || !spans.length && !ticks.length) {
      emptyFrame(container, 90, "no attempts yet");
      return;
    }
    if (end <= start) end = start + 1000;
    const label = `Timeline from ${fullTime(start)} over ${durationLabel(end - start)}: ${spans.length} attempts` +
      (spans.length ? " (" + spans.map((s) => s.status).join(", ") + ")" : "") + `, ${calls.length} host calls`;
    const { svg, width } = frame(container, height, label);
    const labelW = Math.min(70, width * 0.18);
    const plot = { x: labelW, y: M.top + 12, w: width - labelW - 14, h: height - M.top - 12 - M.bottom };
    const xOf = (t) => plot.x + ((t - start) / (end - start)) * plot.w;
    const g0 = svgEl("g", { class: "chart-axis" });
    g0.append(svgEl("line", { x1: plot.x, x2: plot.x + plot.w, y1: plot.y + plot.h, y2: plot.y + plot.h, class: "chart-base" }));
    svg.append(g0);
    // Marks: full-height dashed lines with a short label on top.
    const mg = svgEl("g", { class: "timeline-marks" });
    let lastLabelX = -Infinity;
    for (const m of marks) {
      const x = xOf(ms(m.at));
      const line = svgEl("line", { x1: x, x2: x, y1: plot.y - 4, y2: plot.y + plot.h, class: "timeline-mark" });
      title(line, `${m.label}\n${fullTime(ms(m.at))}`);
      mg.append(line);
      if (x - lastLabelX > 60 && m.short !== false) {
        const anchor = x > plot.x + plot.w - 40 ? "end" : "start";
        mg.append(title(svgEl("text", { x: x + (anchor === "start" ? 2 : -2), y: plot.y - 5, "text-anchor": anchor, class: "timeline-mark-label" }, m.short || m.label), m.label));
        lastLabelX = x;
      }
    }
    svg.append(mg);
    const sg = svgEl("g", { class: "timeline-spans" });
    spans.forEach((s, i) => {
      const y = plot.y + 4 + i * (rowH + 6);
      const from = ms(s.from);
      const to = isNaN(ms(s.to)) ? end : ms(s.to);
      const x = xOf(from);
      const w = Math.max(2, xOf(to) - x);
      sg.append(svgEl("text", { x: labelW - 6, y: y + rowH / 2 + 4, "text-anchor": "end", class: "timeline-row-label" }, s.row || `#${i + 1}`));
      const r = paint(svgEl("rect", { x, y, width: w, height: rowH, rx: 3, class: "timeline-span" + (isNaN(ms(s.to)) ? " open" : "") }), "fill", colorOf(s.status));
      title(r, `${s.label || ""}\n${s.status} · ${durationLabel(to - from)}\n${fullTime(from)} → ${isNaN(ms(s.to)) ? "now" : fullTime(to)}`);
      sg.append(r);
      const text = `${s.status} · ${durationLabel(to - from)}`;
      if (w > text.length * 6.2 + 12) sg.append(svgEl("text", { x: x + 6, y: y + rowH / 2 + 4, class: "timeline-span-label" }, text));
    });
    svg.append(sg);
    if (calls.length) {
      const cg = svgEl("g", { class: "timeline-calls" });
      const y = plot.y + 4 + spans.length * (rowH + 6) + 2;
      cg.append(svgEl("text", { x: labelW - 6, y: y + 10, "text-anchor": "end", class: "timeline-row-label" }, "calls"));
      for (const c of calls) {
        const x = xOf(ms(c.at));
        const w = c.ms > 0 ? Math.max(1.5, xOf(ms(c.at) + c.ms) - x) : 1.5;
        const tick = svgEl("rect", { x, y, width: w, height: 12, class: "timeline-call" + (c.error ? " error" : "") });
        title(tick, `${c.label}\n${fullTime(ms(c.at))}`);
        cg.append(tick);
      }
      svg.append(cg);
    }
    const span = end - start;
    const ag = svgEl("g", { class: "chart-axis" });
    const n = Math.max(2, Math.min(6, Math.floor(plot.w / 100)));
    for (let i = 0; i <= n; i++) {
      const t = start + (span * i) / n;
      const x = xOf(t);
      const rel = "+" + durationLabel(t - start);
      ag.append(svgEl("text", { x, y: plot.y + plot.h + 14, "text-anchor": i === 0 ? "start" : i === n ? "end" : "middle" }, i === 0 ? timeLabel(t, span < 300e3 ? 0 : span) : rel));
    }
    svg.append(ag);
    const kinds = [...new Set(spans.map((s) => s.status))];
    const items = kinds.map((k) => ({ label: k, color: colorOf(k) }));
    items.push({ label: "marks", color: "var(--muted)", line: true });
    if (calls.length) items.push({ label: "host calls", color: "var(--ink-2)" });
    container.replaceChildren(svg, legend(items));
  }

  window.Charts = { stackedBars, lines, timeline, durationLabel, compact };
})();
