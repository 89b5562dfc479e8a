/* The run section of a campaign's page (issue #26 item 6): started, elapsed, rounds done and the
 * time left per arm, the headline gain per tier and, once the campaign has finished, the verdict.
 *
 * Every sentence is written on the server (swarm_app/web/run_info.py, the same function
 * that rendered the section into the page); this script only keeps it current. Once a second it
 * looks at what static/campaigns/dashboard.js already holds (window.swarmDashboard: the last
 * tables message, the campaign's state), and when either has changed it fetches
 * /api/campaigns/<id>/run and redraws the section; between fetches it ticks the elapsed time.
 * Text goes in with textContent only (CSP: no inline script, no HTML from outside).
 */
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("dashboard-config").textContent);
  const run = {
    info: null, // the last /run answer
    fetches: 0, // answers applied (read by tests)
    offset: 0, // server clock minus this browser's, ms
    seenTables: null,
    seenState: null,
    inFlight: false,
    errors: [],
  };
  window.swarmRun = run;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function byId(id) {
    return document.getElementById(id);
  }
  function setText(id, text) {
    const node = byId(id);
    node.textContent = text === null || text === undefined ? "" : String(text);
    node.hidden = text === null || text === undefined || text === "";
  }

  // The same words as run_info.duration_text.
  function duration(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return "–";
    const total = Math.floor(seconds);
    const two = (n) => String(n).padStart(2, "0");
    if (total < 60) return total + " s";
    if (total < 3600) return Math.floor(total / 60) + " min " + two(total % 60) + " s";
    if (total < 86400) return Math.floor(total / 3600) + " h " + two(Math.floor((total % 3600) / 60)) + " min";
    return Math.floor(total / 86400) + " d " + Math.floor((total % 86400) / 3600) + " h";
  }

  function tickElapsed() {
    const info = run.info;
    if (!info || !info.started_at || (info.state !== "running" && info.state !== "paused")) return;
    const seconds = (Date.now() + run.offset - Date.parse(info.started_at)) / 1000;
    byId("run-elapsed").textContent = duration(seconds) + " (pauses included)";
  }

  function headline(h) {
    const p = el("p", null, "headline");
    p.dataset.tier = h.tier;
    p.append(el("span", h.tier, "headline-tier"), " ", el("span", h.what, "headline-what"), ": ",
      el("strong", h.value, "headline-value"));
    if (h.interval) p.append(" ", el("span", h.interval, "headline-interval"));
    if (h.note) p.append(" ", el("span", h.note, "headline-note"));
    if (h.n) p.append(" ", el("span", h.n, "headline-n"));
    if (h.design) p.append(" ", el("span", h.design, "headline-design"));
    return p;
  }

  function render(info) {
    run.info = info;
    const section = byId("run");
    section.dataset.state = info.state;
    byId("run-state").textContent = info.state_text;
    byId("run-started").textContent = info.started;
    byId("run-elapsed").textContent = info.elapsed;
    setText("run-finished", info.finished);
    byId("run-finished-label").hidden = !info.finished;
    byId("headlines").replaceChildren(...info.headlines.map(headline));
    byId("run-eta").replaceChildren(...info.eta.rows.map((row) => {
      const li = el("li");
      li.dataset.tier = row.tier;
      li.dataset.arm = row.arm;
      li.append(el("span", row.tier + " · " + row.label, "eta-arm"), ": ", el("span", row.text, "eta-text"));
      return li;
    }));
    byId("run-progress").hidden = !info.eta.rows.length || info.state === "pending";
    setText("run-eta-total", info.eta.total);
    setText("run-eta-note", info.eta.note);
    byId("verdict").hidden = !info.verdict.length;
    byId("verdict-title").textContent = info.verdict_title || "";
    byId("verdict-tiers").replaceChildren(...info.verdict.map((v) => {
      const div = el("div", null, "verdict-tier");
      div.dataset.tier = v.tier;
      div.dataset.judgement = v.judgement;
      div.dataset.heldOutJudgement = v.held_out_judgement;
      div.append(el("h4", v.tier), ...v.lines.map((line) => el("p", line)));
      return div;
    }));
    byId("independence").textContent = info.independence;
    setText("verdict-pending", info.verdict_pending);
    run.fetches += 1;
  }

  async function refresh() {
    run.inFlight = true;
    try {
      const response = await fetch(config.run, { headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error("HTTP " + response.status);
      const info = await response.json();
      run.offset = Date.parse(info.now) - Date.now();
      render(info);
    } catch (error) {
      // The server is away: the status line says so (dashboard.js); keep what is shown.
      // The next tables message (at least every 15 s, or the reload on reconnecting) asks again.
      if (run.errors.length < 10) run.errors.push(String(error));
    } finally {
      run.inFlight = false;
    }
  }

  function poll() {
    const dashboard = window.swarmDashboard;
    if (dashboard && !run.inFlight) {
      const tables = dashboard.tables;
      const campaignState = dashboard.campaignState;
      if (tables && (tables !== run.seenTables || campaignState !== run.seenState)) {
        run.seenTables = tables;
        run.seenState = campaignState;
        refresh();
      }
    }
    tickElapsed();
  }

  // What the server rendered into the page is current until the first tables message.
  const section = byId("run");
  run.info = { state: section.dataset.state, started_at: section.dataset.startedAt || null };
  if (section.dataset.serverNow) run.offset = Date.parse(section.dataset.serverNow) - Date.now();
  setInterval(poll, 1000);
})();
