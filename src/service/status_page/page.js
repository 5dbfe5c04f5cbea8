"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 300, HEIGHT = 60;
  let timer = null;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function replace(id, ...children) {
    const node = document.getElementById(id);
    node.replaceChildren(...children);
    return node;
  }

  function duration(seconds) {
    const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
    const m = Math.floor(seconds / 60) % 60, s = Math.floor(seconds % 60);
    if (d > 0) return d + "d " + h + "h";
    if (h > 0) return h + "h " + m + "m";
    if (m > 0) return m + "m " + s + "s";
    return s + "s";
  }

  function when(unix) {
    return unix ? new Date(unix * 1000).toISOString().replace(".000Z", "Z") : "never";
  }

  function number(value, digits) {
    if (value === null || value === undefined || !isFinite(value)) return "–";
    return Number(value).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
  }

  function percent(value) {
    return value === null || !isFinite(value) ? "–" : number(value * 100, 1) + " %";
  }

  // A line chart of `values` (null: no point) as inline SVG; `top` is the value at the top edge.
  function chart(title, values, format, cls, top) {
    const figure = el("figure", null, "card");
    const caption = el("figcaption");
    const present = values.filter((v) => v !== null && isFinite(v));
    const last = present.length ? present[present.length - 1] : null;
    const max = top !== undefined ? top : Math.max(0, ...present);
    caption.append(el("span", title), el("span", "now " + format(last) + " · max " + format(present.length ? Math.max(...present) : null), "muted"));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("viewBox", "0 0 " + WIDTH + " " + HEIGHT);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", title);
    const grid = document.createElementNS(SVG, "path");
    grid.setAttribute("class", "grid");
    grid.setAttribute("d", "M0," + (HEIGHT - 0.5) + " H" + WIDTH + " M0,0.5 H" + WIDTH);
    svg.append(grid);
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("class", "line" + (cls ? " " + cls : ""));
    let d = "", points = 0;
    const step = values.length > 1 ? WIDTH / (values.length - 1) : WIDTH;
    values.forEach((value, i) => {
      if (value === null || !isFinite(value)) return;
      const x = (values.length > 1 ? i * step : WIDTH).toFixed(1);
      const y = (HEIGHT - 1 - (max > 0 ? (value / max) * (HEIGHT - 2) : 0)).toFixed(1);
      d += (points === 0 ? "M" : " L") + x + "," + y;
      points += 1;
    });
    path.setAttribute("d", d || "M0," + (HEIGHT - 1));
    path.setAttribute("data-points", String(points));
    path.setAttribute("data-max", String(present.length ? Math.max(...present) : 0));
    svg.append(path);
    figure.append(caption, svg);
    return figure;
  }

  function perSecond(counts, interval) {
    return counts.map((n) => n / interval);
  }

  function share(part, whole) {
    return whole.map((n, i) => (n > 0 ? part[i] / n : null));
  }

  function definitions(pairs) {
    const dl = el("dl");
    for (const [term, value] of pairs) {
      const dd = el("dd");
      if (value instanceof Node) dd.append(value); else dd.textContent = String(value);
      dl.append(el("dt", term), dd);
    }
    return dl;
  }

  function table(headers, rows) {
    const t = el("table");
    const head = el("tr");
    headers.forEach((h) => head.append(el("th", h)));
    t.append(head);
    for (const row of rows) {
      const tr = el("tr");
      row.forEach((cell) => tr.append(el("td", cell)));
      t.append(tr);
    }
    return t;
  }

  function limitText(rule) {
    switch (rule.kind) {
      case "unlimited": return "unlimited";
      case "blocked": return "blocked (0 per " + rule.unit + ")";
      default: {
        const per = rule.unit_multiplier > 1 ? rule.unit_multiplier + " " + rule.unit + "s" : rule.unit;
        return rule.requests_per_unit + " per " + per;
      }
    }
  }

  function flags(rule) {
    const out = [];
    if (rule.shadow_mode) out.push("shadow");
    if (rule.quota_mode) out.push("quota");
    if (rule.detailed_metric) out.push("detailed_metric");
    if (rule.name) out.push("name " + rule.name);
    return out.join(", ");
  }

  function drawHeader(s) {
    replace("build", "version " + s.build.version + " (" + s.build.profile + ") · up " + duration(s.uptime_seconds) +
      " since " + when(s.started_unix) + " · " + (s.serving ? "SERVING" : "NOT SERVING"));
    replace("refresh", "updated " + when(s.now_unix) + ", every " + s.refresh_seconds + " s");
  }

  function drawProcess(s) {
    const p = s.samples, interval = p.interval_seconds;
    replace("window", duration(interval * p.kept) + " (" + p.times.length + " samples every " + interval + " s)");
    replace("process-charts",
      chart("decisions / s", perSecond(p.requests, interval), (v) => number(v)),
      chart("share over limit", share(p.over_limit, p.requests), percent, "deny", 1),
      chart("mean decision time (ms)", p.mean_latency_us.map((us, i) => (p.requests[i] > 0 ? us / 1000 : null)), (v) => number(v, 3)));
  }

  function drawRules(s) {
    const r = s.rules, interval = s.samples.interval_seconds;
    replace("rules-note", r.tracked + " rules with hits kept (at most " + r.max_tracked + ", --metrics-max-rule-series)" +
      (r.untracked ? ", " + r.untracked + " more not kept" : "") + "; the " + r.charts.length +
      " busiest shown (at most " + r.max_charts + ", --status-page-max-rules)");
    const cards = r.charts.map((rule) => {
      const card = el("div", null, "rule card");
      card.dataset.rule = rule.rule;
      card.append(el("h3", rule.rule),
        chart("decisions / s", perSecond(rule.hits, interval), (v) => number(v)),
        chart("share over limit", share(rule.over_limit, rule.hits), percent, "deny", 1));
      return card;
    });
    replace("rule-charts", ...cards);
  }

  function drawStore(s) {
    const st = s.store;
    const state = el("span", st.state, st.state === "healthy" ? "good" : "bad");
    replace("store-body",
      definitions([["store", st.kind], ["address", st.address || "in this process"], ["state", state],
        ["health check", st.latency_us === null ? "–" : number(st.latency_us / 1000, 3) + " ms"]]),
      chart("health check time (ms)", st.latency_series.map((us) => (us === null ? null : us / 1000)), (v) => number(v, 3)));
  }

  function drawConfig(s) {
    const c = s.config;
    const pairs = [["source", c.source]];
    if (c.source === "files") pairs.push(["files", c.paths.join(", ")]);
    else pairs.push(["xDS server", c.server], ["xDS version", c.xds_version === null ? "(none received yet)" : c.xds_version]);
    pairs.push(["fingerprint", c.fingerprint], ["loaded", when(c.loaded_unix)],
      ["reloads", c.reloads_ok + " ok, " + c.reloads_failed + " rejected" + (c.last_reload_ok ? "" : " (the last one was rejected)")],
      ["domains", c.domains], ["rules", c.rules_total + (c.rules_total > c.rules.length ? " (first " + c.rules.length + " shown, --status-page-max-rules)" : "")]);
    const rows = c.rules.map((r) => [r.domain, r.rule, limitText(r), r.algorithm || "", r.burst === null ? "" : String(r.burst), r.consistency || "", flags(r)]);
    const rules = table(["domain", "rule", "limit", "algorithm", "burst", "consistency", "flags"], rows);
    rules.id = "config-rules";
    replace("config-body", definitions(pairs), rules);
  }

  function ranking(title, r) {
    const rows = r.top.map((v) => [v.value === undefined ? "#" + v.hash.slice(0, 12) : v.value, number(v.count, 0), "±" + number(v.error, 0)]);
    const box = el("div");
    box.append(el("h3", title + " (total " + number(r.total, 0) + ")"), table(["value", "count", "error"], rows));
    return box;
  }

  function drawTop(s) {
    const t = s.top;
    if (!t.enabled) {
      const p = el("p", null, "muted");
      p.append("Off: start with ", el("code", "--top-max-rules N"), " to rank the values each rule limits (see GET /top).");
      replace("top-body", p);
      return;
    }
    const cards = t.rules.map((rule) => {
      const card = el("div", null, "card");
      card.append(el("h3", rule.rule), ranking("denied", rule.denied), ranking("hits", rule.hits));
      return card;
    });
    const note = el("p", t.rules.length + " rules shown, the most denied first" + (t.untracked_rules ? "; " + t.untracked_rules + " rules not tracked (--top-max-rules)" : ""), "muted");
    const grid = el("div", null, "charts");
    grid.append(...cards);
    replace("top-body", note, grid);
  }

  function drawRlqs(s) {
    const q = s.rlqs;
    if (q === null) { replace("rlqs-body", el("p", "not served on this port", "muted")); return; }
    const rows = q.buckets_shown.map((b) => [b.domain, Object.entries(b.bucket).map(([k, v]) => k + "=" + v).join(", "), b.rule,
      b.blanket_rule || (b.limit_per_second === undefined ? "" : number(b.limit_per_second) + " / s"), String(b.streams)]);
    replace("rlqs-body", definitions([["streams", q.streams], ["buckets", q.buckets]]),
      table(["domain", "bucket", "rule", "limit", "streams"], rows),
      el("p", q.buckets > q.buckets_shown.length ? "first " + q.buckets_shown.length + " buckets shown; GET /rlqs lists them all" : "", "muted"));
  }

  function draw(s) {
    drawHeader(s);
    drawProcess(s);
    drawRules(s);
    drawStore(s);
    drawConfig(s);
    drawTop(s);
    drawRlqs(s);
    document.body.dataset.drawn = String(s.now_unix);
  }

  async function refresh() {
    let next = 5;
    try {
      const response = await fetch("status.json", { cache: "no-store", headers: { accept: "application/json" } });
      if (!response.ok) throw new Error("status.json: HTTP " + response.status);
      const status = await response.json();
      draw(status);
      next = status.refresh_seconds;
    } catch (error) {
      replace("refresh", el("span", "cannot refresh: " + error.message, "bad"));
    }
    timer = setTimeout(refresh, next * 1000);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && timer !== null) { clearTimeout(timer); refresh(); }
  });
  refresh();
})();
