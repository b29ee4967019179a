// The operator's page: one long poll (GET api/state?since=V&wait=25) keeps everything current.
// No build step, no library: every value from the cluster goes in through textContent, never HTML.
"use strict";
(() => {
  const CLASSES = ["idle", "busy", "draining", "drained", "down", "unregistered", "other"];
  const WAIT = 25;
  const $ = (id) => document.getElementById(id);
  let version = null;
  let offset = 0; // server clock - this clock, in seconds
  let last = null;
  let polling = false;
  const tiles = new Map();
  const rendered = { config: null, plans: null, order: null, maintenance: null, upgrade: null };

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "dataset") Object.assign(e.dataset, v);
      else if (k === "text") e.textContent = v;
      else e[k] = v;
    }
    for (const c of children) e.append(c);
    return e;
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const now = () => Date.now() / 1000 + offset;
  const FAR = 253402300799;

  function clock(epoch) {
    if (epoch == null) return "-";
    if (epoch >= FAR) return "never (no time limit)";
    return new Date(epoch * 1000).toISOString().slice(11, 19) + "Z";
  }
  function span(seconds) {
    const s = Math.max(0, Math.round(seconds));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return `${h}h${String(m).padStart(2, "0")}m`;
    if (m) return `${m}m${String(r).padStart(2, "0")}s`;
    return `${r}s`;
  }
  function ids(jobs) {
    if (!jobs.length) return "-";
    return jobs.slice(0, 4).join(",") + (jobs.length > 4 ? `,+${jobs.length - 4}` : "");
  }

  // ------------------------------------------------------------------ access
  function showLogin(message) {
    polling = false;
    $("main").hidden = true;
    $("logout").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setLive(false, "logged out");
    $("token").focus();
  }

  async function login(ev) {
    ev.preventDefault();
    const token = $("token").value;
    let r;
    try {
      r = await fetch("login", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token }),
      });
    } catch (e) {
      $("login-error").textContent = "the control plane did not answer";
      return;
    }
    $("token").value = "";
    if (r.status !== 204) {
      $("login-error").textContent = r.status === 401 ? "wrong token" : `refused (HTTP ${r.status})`;
      return;
    }
    start();
  }

  async function logout() {
    await fetch("logout", { method: "POST", credentials: "same-origin" }).catch(() => {});
    showLogin();
  }

  function setLive(on, why) {
    const live = $("live");
    live.className = "live " + (on ? "on" : "off");
    live.textContent = on ? "live" : why || "offline";
  }

  // ------------------------------------------------------------------ the long poll
  function start() {
    $("login").hidden = true;
    version = null;
    if (!polling) poll();
  }

  async function poll() {
    polling = true;
    while (polling) {
      let r;
      const since = version === null ? "" : `&since=${encodeURIComponent(version)}`;
      try {
        r = await fetch(`api/state?wait=${WAIT}${since}`, { credentials: "same-origin", cache: "no-store" });
      } catch (e) {
        setLive(false, "connection lost; retrying");
        await sleep(2000);
        continue;
      }
      if (r.status === 401) {
        showLogin(version === null ? "" : "the session ended: log in again");
        return;
      }
      if (!r.ok) {
        setLive(false, `HTTP ${r.status}; retrying`);
        await sleep(2000);
        continue;
      }
      const doc = await r.json();
      offset = doc.now - Date.now() / 1000;
      version = doc.version;
      last = doc;
      render(doc);
      $("main").hidden = false;
      $("logout").hidden = false;
      setLive(true);
    }
  }

  // ------------------------------------------------------------------ rendering
  function render(doc) {
    renderCluster(doc);
    renderGrid(doc);
    renderDrains(doc);
    renderUnowned(doc);
    renderConfig(doc.config);
    renderPlans(doc.config);
    renderOrder(doc.scale_in);
    renderSection("maintenance", doc.maintenance);
    renderSection("upgrade", doc.upgrade);
    document.body.dataset.version = doc.version;
  }

  function renderCluster(doc) {
    const c = doc.cluster || {};
    const read = c.read_at ? `Slurm read ${span(doc.now - c.read_at)} ago` : "Slurm not read yet";
    const lead = c.leader ? "leader" : `standby (leader: ${c.lease_holder || "none"})`;
    const ctld = c.controllers; // several controllers only: the one in control
    const control = ctld ? ` · slurmctld: ${ctld.primary ? `${ctld.primary} in control` : "none in control"}` : "";
    $("cluster-line").textContent = `${c.identity || ""} · ${read} · ${lead}${control}`;
    const problems = [];
    if (!doc.loaded) problems.push(`no fleet view yet: ${c.slurm_error || "Slurm has not been read"}`);
    else if (c.slurm_error) problems.push(`the last Slurm read failed: ${c.slurm_error} (showing the one before)`);
    const sick = Object.entries((c.health && c.health.nodes) || {});
    if (sick.length) {
      const each = sick.map(([name, h]) => `${name} ${h.signals.map((s) => s.name).join("+")} (${h.state})`);
      problems.push(`health signals: ${each.join(", ")}`);
    }
    const banner = $("banner");
    banner.hidden = !problems.length;
    banner.textContent = problems.join("; ");
  }

  function hhmm(epoch) {
    return epoch == null ? "-" : epoch >= FAR ? "∞" : new Date(epoch * 1000).toISOString().slice(11, 16);
  }

  function tileText(n) {
    switch (n.class) {
      case "draining":
        return `job ${ids(n.jobs)} → ${hhmm(n.busy_until)}`;
      case "busy":
        return `${n.jobs.length} job${n.jobs.length === 1 ? "" : "s"} → ${hhmm(n.busy_until)}`;
      case "idle":
        return "idle";
      default:
        return n.reason || n.state;
    }
  }

  function renderGrid(doc) {
    const legend = $("legend");
    legend.replaceChildren(
      ...CLASSES.map((c) =>
        el("li", { className: "c-" + c, dataset: { class: c, count: String(doc.counts[c] || 0) }, text: `${c} ${doc.counts[c] || 0}` }),
      ),
    );
    $("fleet-total").textContent = `${doc.nodes.length} node${doc.nodes.length === 1 ? "" : "s"}`;
    const grid = $("grid");
    const seen = new Set();
    doc.nodes.forEach((n, i) => {
      seen.add(n.name);
      let t = tiles.get(n.name);
      if (!t) {
        t = el("div", { role: "listitem" }, el("span", { className: "n" }), el("span", { className: "d" }));
        tiles.set(n.name, t);
      }
      t.className = "node c-" + n.class;
      t.dataset.name = n.name;
      t.dataset.class = n.class;
      t.firstChild.textContent = n.name;
      t.lastChild.textContent = tileText(n);
      t.title = [
        n.name,
        n.state,
        n.partitions.length ? `partitions: ${n.partitions.join(",")}` : "",
        n.jobs.length ? `jobs: ${n.jobs.join(",")}` : "",
        n.busy_until ? `expected end: ${clock(n.busy_until)}` : "",
        n.reason ? `reason: ${n.reason}` : "",
      ].filter(Boolean).join("\n");
      if (grid.children[i] !== t) grid.insertBefore(t, grid.children[i] || null);
    });
    for (const [name, t] of tiles) {
      if (!seen.has(name)) {
        t.remove();
        tiles.delete(name);
      }
    }
    const pods = doc.unregistered_pods || [];
    $("pods-unregistered").textContent = pods.length
      ? `worker pods reported unregistered: ${pods.map((p) => `${p.pod} (${p.detail || "no detail"})`).join(", ")}`
      : "";
  }

  function renderDrains(doc) {
    const rows = doc.drains.map((d) => {
      const t = now();
      let progress;
      if (d.deadline) {
        const whole = Math.max(1, d.deadline - d.started_at);
        const pct = Math.min(100, Math.max(0, (100 * (t - d.started_at)) / whole));
        const left = d.deadline - t;
        const fill = el("span");
        fill.style.width = `${pct.toFixed(1)}%`; // CSSOM: allowed by the page's style-src 'self'
        progress = el(
          "td",
          {},
          el("span", { className: "bar" }, fill),
          ` ${Math.round(pct)}% · ${left > 0 ? span(left) + " left" : "past its deadline"}`,
        );
      } else {
        progress = el("td", { text: d.unlimited ? "no deadline: a job with no time limit holds it" : "-" });
      }
      return el(
        "tr",
        { dataset: { node: d.node } },
        el("td", { text: d.node }),
        el("td", { text: `job ${ids(d.jobs)}` }),
        el("td", { text: (d.reason || "none given") + (d.ours ? "" : " (not set by slurm-sidecars)") }),
        el("td", { text: `${clock(d.started_at)} (${span(t - d.started_at)} ago)` }),
        el("td", { text: clock(d.deadline) }),
        progress,
      );
    });
    $("drain-rows").replaceChildren(...rows);
    $("drains-none").hidden = rows.length > 0;
    $("drains-done").replaceChildren(
      ...doc.drains_done.map((d) =>
        el("li", {
          dataset: { node: d.node },
          text: `${d.node}: drained in ${span(d.done_at - d.started_at)}, done at ${clock(d.done_at)}`,
        }),
      ),
    );
  }

  function renderUnowned(doc) {
    const found = (doc.unowned && doc.unowned.nodes) || [];
    const t = now();
    const rows = found.map((u) =>
      el(
        "tr",
        { dataset: { node: u.node, class: u.class } },
        el("td", { text: u.node }),
        el("td", { text: u.state }),
        el("td", { text: u.class }),
        el("td", { text: u.since ? span(t - u.since) : "-" }),
        el("td", { text: u.reason || "none given" }),
      ),
    );
    $("unowned-rows").replaceChildren(...rows);
    $("unowned-none").hidden = rows.length > 0;
  }

  function diffBlock(f) {
    const wrap = el("div", { className: "file" });
    const head = `${f.name} (${f.change})${f.note ? ": " + f.note : ""}`;
    wrap.append(el("div", { text: head }));
    if (f.diff) {
      const pre = el("pre", { className: "diff" });
      for (const line of f.diff.split("\n")) {
        if (!line) continue;
        const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "";
        pre.append(cls ? el("span", { className: cls, text: line }) : line + "\n");
      }
      wrap.append(pre);
    }
    return wrap;
  }

  function renderConfig(cfg) {
    const key = JSON.stringify([cfg.status, cfg.history, cfg.error]);
    if (key === rendered.config) return;
    rendered.config = key;
    const cur = $("config-current");
    const s = cfg.status;
    const parts = [];
    if (!cfg.source) parts.push("config-sync is not connected (the control plane runs without --config-sync)");
    else if (cfg.error) parts.push(`config-sync did not answer: ${cfg.error}`);
    if (s && s.applied) parts.push(`live: generation ${s.applied.generation} (${String(s.applied.sha256).slice(0, 12)}) since ${s.applied.at}`);
    else if (s) parts.push("nothing applied yet");
    if (s && s.pending) parts.push("a change is pending");
    if (s && s.restart_required) parts.push("a change is held: it needs slurmctld restarted");
    cur.textContent = parts.join(" · ");
    const open = new Set([...document.querySelectorAll("#config-history details[open]")].map((d) => d.dataset.key));
    const items = (cfg.history || []).map((g) => {
      const k = `${g.sha256}@${g.at}`;
      const title = g.generation != null ? `generation ${g.generation}` : `not applied (generation ${g.based_on ?? "-"} kept)`;
      const li = el(
        "li",
        { dataset: { outcome: g.outcome, sha: g.sha256 } },
        el("span", { className: "badge o-" + g.outcome, text: g.outcome.replace("_", " ") }),
        `${title} · ${String(g.sha256).slice(0, 12)} · ${g.at} · ${g.files.length} file${g.files.length === 1 ? "" : "s"} changed`,
      );
      if (g.reason) li.append(el("p", { className: "reason", text: g.reason }));
      if (g.files.length) {
        const det = el("details", { dataset: { key: k } }, el("summary", { text: "what changed" }), ...g.files.map(diffBlock));
        det.open = open.has(k);
        li.append(det);
      }
      return li;
    });
    if (!items.length) items.push(el("li", { className: "muted", text: "no generation recorded since config-sync started" }));
    $("config-history").replaceChildren(...items);
  }

  const VERDICTS = ["would-apply", "no-change", "refused", "held-for-jobs", "restart-required"];

  // config-sync's recent plans (read with the viewer's credential: this page can show, never start one)
  function renderPlans(cfg) {
    const plans = cfg.plans || { served: null, error: null, items: [] };
    const key = JSON.stringify([cfg.source, cfg.error, plans]);
    if (key === rendered.plans) return;
    rendered.plans = key;
    const items = plans.items || [];
    let note = "";
    if (!cfg.source) note = "config-sync is not connected";
    else if (cfg.error) note = plans.served === null ? "config-sync did not answer" : "config-sync did not answer: the plans as last read";
    else if (plans.error) note = `the plans could not be read: ${plans.error}` + (items.length ? " (showing the last read)" : "");
    else if (plans.served === null) note = "not read yet";
    else if (!plans.served) note = "config-sync serves no plans: it runs without --operator-token-file";
    $("plans-note").textContent = note;
    $("plans-note").hidden = !note;
    const rows = items.map((p) => {
      const known = VERDICTS.includes(p.verdict);
      const against = p.live_sha256 ? `against ${String(p.live_sha256).slice(0, 12)}` : "against no live set";
      const took = p.dry_run_seconds == null ? "no dry run" : `dry run ${Number(p.dry_run_seconds).toFixed(2)} s`;
      const li = el(
        "li",
        { dataset: { verdict: p.verdict, sha: p.sha256 } },
        el("span", { className: "badge " + (known ? "v-" + p.verdict : "v-other"), text: p.verdict.replaceAll("-", " ") }),
        `${p.at} · ${String(p.sha256).slice(0, 12)} ${against} · ${p.files.length} file${p.files.length === 1 ? "" : "s"} changed · ${took}`,
      );
      if (p.reason) li.append(el("p", { className: "reason", text: p.reason }));
      if (p.jobs_total) {
        const more = p.jobs_total > p.jobs.length ? ` (+${p.jobs_total - p.jobs.length} more)` : "";
        li.append(el("p", { className: "jobs", text: `jobs it would end, requeue or strand: ${p.jobs.join(", ")}${more}` }));
      }
      if (p.restart.length) li.append(el("p", { className: "restart", text: `slurmctld restart: ${p.restart.join("; ")}` }));
      if (p.files.length) li.append(el("p", { className: "files muted", text: p.files.map((f) => `${f.name} (${f.change})`).join(", ") }));
      return li;
    });
    if (!rows.length && plans.served) rows.push(el("li", { className: "muted", text: "no plan since config-sync started" }));
    $("plans").replaceChildren(...rows);
  }

  const ORDER_SHOWN = 48; // the first to go matter; the rest folds away at fleet sizes

  function renderOrder(order) {
    const key = order.join(" ");
    if (key === rendered.order) return;
    rendered.order = key;
    const list = $("scale-in-order");
    list.replaceChildren(...order.map((n) => el("li", { text: n })));
    if (!order.length) list.append(el("li", { className: "muted", text: "no node to remove" }));
    const more = $("scale-in-more");
    more.hidden = order.length <= ORDER_SHOWN;
    [...list.children].forEach((li, i) => { li.hidden = i >= ORDER_SHOWN && !more.open; });
    $("scale-in-more-label").textContent = `all ${order.length} (${order.length - ORDER_SHOWN} more)`;
  }

  function renderSection(name, value) {
    const key = JSON.stringify(value);
    if (key === rendered[name]) return;
    rendered[name] = key;
    const body = $(`${name}-body`);
    if (value == null) {
      body.textContent = "not available from this control plane";
      return;
    }
    const list = Array.isArray(value) ? value : [value];
    if (!list.length) {
      body.textContent = "none";
      return;
    }
    const cols = [...new Set(list.flatMap((o) => Object.keys(o)))];
    const fmt = (v) => (v == null ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v));
    body.replaceChildren(
      el(
        "table",
        {},
        el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { text: c })))),
        el("tbody", {}, ...list.map((o) => el("tr", {}, ...cols.map((c) => el("td", { text: fmt(o[c]) }))))),
      ),
    );
  }

  // ------------------------------------------------------------------ start
  document.addEventListener("DOMContentLoaded", () => {
    $("login-form").addEventListener("submit", login);
    $("logout").addEventListener("click", logout);
    $("scale-in-more").addEventListener("toggle", () => {
      rendered.order = null;
      if (last) renderOrder(last.scale_in);
    });
    setInterval(() => last && renderDrains(last), 1000); // progress bars move between answers
    start(); // a live session cookie opens the page at once; otherwise the answer is 401: log in
  });
})();
