/* The campaign page: loads the aggregated dashboard JSON once, then follows the campaign's
 * websocket (/ws/campaigns/<id>/) and redraws without reloading.
 *
 * The server sends aggregates only: per-round means/stds per tier and arm (downsampled to at
 * most `max_points` per series), tables every few seconds, and raw points only for the agents
 * this viewer selected. Every string that came from a worker is inserted with textContent.
 */
(function () {
  "use strict";

  const config = JSON.parse(document.getElementById("dashboard-config").textContent);
  // The arms in the page's order and their labels, from the server's one definition
  // (series.ARM_LABELS), in the page's config and again with every tables message.
  const ARMS = config.arms.map((a) => a.arm);
  const LABELS = Object.fromEntries(config.arms.map((a) => [a.arm, a.label]));
  const COLORS = { swarm: "#2f6fde", isolated: "#d9822b", filtered: "#2a9d8f", self: "#9b5de5", dyn: "#c0392b" };
  const BANDS = {
    swarm: "rgba(47,111,222,0.15)", isolated: "rgba(217,130,43,0.15)", filtered: "rgba(42,157,143,0.15)",
    self: "rgba(155,93,229,0.15)", dyn: "rgba(192,57,43,0.15)",
  };
  // Titles are HTML headings above each chart and legends sit above the plot area, so neither
  // can cover the other (nor an axis title) at any width; plotly's toolbar, which covered the
  // titles, is off (drag zooms, a double-click resets).
  const PLOT_CONFIG = { displaylogo: false, responsive: true, displayModeBar: false };
  const LEGEND = { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" };

  const state = {
    step: 1,
    xAxis: "round", // or "completions": the charts' x axis (the toggle above the charts)
    maxPoints: 500,
    tiers: [],
    series: {}, // tier -> arm -> {rows: [{round, mean, std, agents, cumulative}], base: n}
    // tier -> control arm -> Map(round -> {difference, low, high}): the server's 95% bands of the
    // swarm minus each control (payload difference_bands, then the socket's bands), drawn as they are
    bands: {},
    agents: {}, // agent -> {tier, label, round: [], reward: []}
    tables: null, // the last tables message: who works on which tier (the empty panels' words)
    pointsReceived: 0,
    lastPoint: null,
    firstPointAt: null, // ms since the epoch, when the first live point arrived
    lastPointAt: null,
    ready: false,
    socketOpen: false,
    socketEverOpen: false,
    campaignState: null, // the campaign's state as last heard from the server
    loadNote: "", // what the last load said (downsampling, backlog, server time)
    messages: { points: 0, tables: 0, state: 0 }, // socket messages received, by type
    reconnects: 0,
    errors: [], // uncaught script errors on this page (the first few)
  };
  window.swarmDashboard = state; // read by tests and curious viewers
  let socket = null;
  let retry = 0; // failed connection attempts since the socket was last open
  window.addEventListener("error", (event) => {
    if (state.errors.length < 10) state.errors.push(String(event.message));
  });

  // --- helpers ------------------------------------------------------------------------------
  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function fmt(value, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    return Number(value).toFixed(digits === undefined ? 3 : digits);
  }
  function pct(value) {
    if (value === null || value === undefined) return "–";
    return (value >= 0 ? "+" : "") + value.toFixed(1) + " %";
  }
  function slug(tier) {
    return tier.replace(/[^a-zA-Z0-9_-]/g, "_");
  }

  // --- series -------------------------------------------------------------------------------
  function setSeries(series, step, bands) {
    state.series = {};
    state.bands = {};
    state.step = step;
    for (const [tier, arms] of Object.entries(bands || {})) {
      state.bands[tier] = {};
      for (const [arm, b] of Object.entries(arms)) {
        state.bands[tier][arm] = new Map(b.round.map((r, i) => [r, { difference: b.difference[i], low: b.low[i], high: b.high[i] }]));
      }
    }
    for (const [tier, arms] of Object.entries(series)) {
      state.series[tier] = {};
      for (const [arm, s] of Object.entries(arms)) {
        const done = s.completions || [];
        const rows = s.round.map((r, i) => ({
          round: r, mean: s.mean[i], std: s.std[i], agents: s.agents[i], cumulative: s.cumulative[i],
          units: s.units[i], unitMean: s.unit_mean[i], unitStd: s.unit_std[i],
          // completions generated per agent up to this round (the compute axis), and in it
          completions: done[i] === undefined ? null : done[i],
          generated: done[i] === null || done[i] === undefined ? null : done[i] - (i > 0 ? done[i - 1] : 0),
        }));
        // Downsampled points keep the server's cumulative values; finer ones are summed here.
        state.series[tier][arm] = { rows: rows, base: step > 1 ? rows.length : 0 };
      }
    }
  }

  function upsertPoint(p) {
    if (!state.series[p.tier]) state.series[p.tier] = {};
    const entry = state.series[p.tier][p.arm] || (state.series[p.tier][p.arm] = { rows: [], base: 0 });
    const rows = entry.rows;
    if (entry.base > 0 && p.round <= rows[entry.base - 1].round) return false; // inside a downsampled bucket
    let i = rows.length;
    while (i > 0 && rows[i - 1].round > p.round) i--;
    const generated = p.completions === undefined ? null : p.completions;
    const row = {
      round: p.round, mean: p.mean, std: p.std, agents: p.agents, cumulative: null, completions: null, generated: generated,
      units: p.units, unitMean: p.unit_mean, unitStd: p.unit_std,
    };
    if (i > 0 && rows[i - 1].round === p.round) rows[i - 1] = row;
    else rows.splice(i, 0, row);
    let running = entry.base > 0 ? rows[entry.base - 1].cumulative : 0;
    let compute = entry.base > 0 ? rows[entry.base - 1].completions : 0;
    for (let j = entry.base; j < rows.length; j++) {
      running += rows[j].mean;
      rows[j].cumulative = running;
      compute = compute === null || rows[j].generated === null ? null : compute + rows[j].generated;
      rows[j].completions = compute;
    }
    return true;
  }

  // A live band (the socket's bands): kept unless its round lies inside a downsampled bucket of
  // either arm, whose band the server computed from the whole bucket.
  function upsertBand(b) {
    const arms = state.series[b.tier] || {};
    for (const arm of ["swarm", b.arm]) {
      const entry = arms[arm];
      if (entry && entry.base > 0 && b.round <= entry.rows[entry.base - 1].round) return;
    }
    const byArm = state.bands[b.tier] || (state.bands[b.tier] = {});
    const map = byArm[b.arm] || (byArm[b.arm] = new Map());
    map.set(b.round, { difference: b.difference, low: b.low, high: b.high });
  }

  // --- charts -------------------------------------------------------------------------------
  function chartBox(id, title) {
    const box = el("figure", null, "chart-box");
    const heading = el("h4", title, "chart-title");
    heading.id = id + "-title";
    box.appendChild(heading);
    const empty = el("p", "", "empty");
    empty.id = id + "-empty";
    box.appendChild(empty);
    const chart = el("div", null, "chart");
    chart.id = id;
    chart.hidden = true;
    box.appendChild(chart);
    return box;
  }

  function ensurePanels() {
    ensureAxisToggle();
    const container = document.getElementById("tiers");
    for (const tier of state.tiers) {
      if (document.getElementById("reward-" + slug(tier))) continue;
      const panel = el("div", null, "tier-panel");
      panel.appendChild(el("h3", tier));
      const row = el("div", null, "charts");
      row.appendChild(chartBox("reward-" + slug(tier), "Mean verified reward"));
      row.appendChild(chartBox("cumulative-" + slug(tier), "Cumulative reward"));
      const difference = chartBox("difference-" + slug(tier),
        "Swarm minus each control, per round (band: the server's 95% Welch t interval of the difference over swarms and seeds; none with one swarm or one seed)");
      difference.classList.add("wide");
      row.appendChild(difference);
      const heldOut = chartBox("heldout-" + slug(tier),
        "Held-out accuracy: fresh questions none trained on, answered greedily, scored by the coordinator (band: 95% t interval over swarms and seeds; none from one)");
      heldOut.classList.add("wide");
      row.appendChild(heldOut);
      panel.appendChild(row);
      container.appendChild(panel);
    }
  }

  // Words instead of empty axes: why a tier has no curve yet.
  function emptyMessage(tier) {
    const t = state.tables;
    if (t && t.campaign.state === "pending") return "Not launched yet: the curves start when the campaign runs.";
    const workers = t ? t.workers.filter((w) => w.tier === tier).length : 0;
    const controls = t ? t.controls.filter((c) => c.tier === tier).length : 0;
    if (!workers && !controls) return "No workers yet on " + tier + ": volunteers join with a worker token.";
    return "Waiting for the tier's model build and the first round: each worker builds or downloads " +
      tier + " before it reports.";
  }

  // Show the chart (drawn by draw()) or the message; a chart is drawn only once it is visible.
  function showChart(id, hasData, message, draw) {
    const chart = document.getElementById(id);
    const empty = document.getElementById(id + "-empty");
    empty.textContent = message;
    empty.hidden = hasData;
    chart.hidden = !hasData;
    if (hasData) draw();
  }

  // Agents behind an arm's curve: the most that reported a round (rounded: a downsampled
  // point's count is a mean over its rounds).
  function armAgents(entry) {
    return Math.round(Math.max(0, ...entry.rows.map((r) => r.agents || 0)));
  }

  // The reward chart's title says what its band is, and that an arm with one agent has none.
  function bandTitle(counts) {
    if (!counts.length) return "Mean verified reward";
    const banded = counts.filter((c) => c.n >= 2).map((c) => c.label);
    const single = counts.filter((c) => c.n < 2).map((c) => c.label);
    if (!banded.length) return "Mean verified reward (one agent per arm: no band)";
    return "Mean verified reward (band: ±1 std across agents" +
      (single.length ? "; no band for " + single.join(", ") + ": one agent" : "") + ")";
  }

  // The charts' x axis: the round, or the compute spent so far (completions generated per
  // agent: over-generation's reward bought with more generation shows as a curve shifted right).
  function xOf(r) {
    return state.xAxis === "round" ? r.round : r.completions;
  }
  function xName() {
    return state.xAxis === "round" ? "round" : "completions generated per agent";
  }
  function ensureAxisToggle() {
    if (document.getElementById("x-axis")) return;
    const label = el("label", "x axis: ", "axis-toggle");
    const select = el("select");
    select.id = "x-axis";
    select.append(new Option("round", "round"), new Option("completions generated per agent", "completions"));
    select.addEventListener("change", () => {
      state.xAxis = select.value;
      drawAll();
    });
    label.appendChild(select);
    const tiers = document.getElementById("tiers");
    tiers.parentNode.insertBefore(label, tiers);
  }

  // Rounds 0..S-1 of an arm have been reported by all its live agents (the server's `settled`,
  // refreshed with every tables message); a newer round is the mean of the agents ahead only.
  function settledRounds(tier, arm) {
    const byTier = state.tables && state.tables.settled ? state.tables.settled[tier] : null;
    return byTier && byTier[arm] !== undefined ? byTier[arm] : Infinity;
  }

  function drawTier(tier) {
    const arms = state.series[tier] || {};
    const rewardTraces = [];
    const cumulativeTraces = [];
    const counts = [];
    for (const arm of ARMS) {
      const entry = arms[arm];
      if (!entry || entry.rows.length === 0) continue;
      const settled = settledRounds(tier, arm);
      const shown = entry.rows.filter((r) => xOf(r) !== null); // on the compute axis: reported it
      const rows = shown.filter((r) => r.round < settled);
      const newest = shown.filter((r) => r.round >= settled);
      const x = rows.map(xOf);
      const n = armAgents(entry);
      counts.push({ label: LABELS[arm], n: n });
      if (n >= 2) {
        rewardTraces.push({
          x: x, y: rows.map((r) => r.mean - r.std), mode: "lines", line: { width: 0 },
          hoverinfo: "skip", showlegend: false, legendgroup: arm, name: arm + " band",
        });
        rewardTraces.push({
          x: x, y: rows.map((r) => r.mean + r.std), mode: "lines", line: { width: 0 }, fill: "tonexty",
          fillcolor: BANDS[arm], hoverinfo: "skip", showlegend: false, legendgroup: arm, name: arm + " band",
        });
      }
      rewardTraces.push({
        x: x, y: rows.map((r) => r.mean), mode: x.length < 60 ? "lines+markers" : "lines",
        name: LABELS[arm] + (n >= 2 ? " (n=" + n + ", band ±1 std)" : " (n=" + n + ", no band)"),
        legendgroup: arm, line: { color: COLORS[arm], width: 2 },
        customdata: rows.map((r) => r.agents),
        hovertemplate: xName() + " %{x}<br>mean %{y:.3f}<br>agents %{customdata}<extra>" + LABELS[arm] + "</extra>",
        meta: { arm: arm },
      });
      if (newest.length) {
        // Open markers, no line, out of the cumulative curve: not yet comparable with the rest.
        rewardTraces.push({
          x: newest.map(xOf), y: newest.map((r) => r.mean), mode: "markers",
          name: LABELS[arm] + ": newest rounds, not all agents yet",
          legendgroup: arm, marker: { color: COLORS[arm], symbol: "circle-open", size: 8 },
          customdata: newest.map((r) => r.agents),
          hovertemplate: xName() + " %{x}<br>mean %{y:.3f}<br>only %{customdata} of " + n +
            " agents so far<extra>" + LABELS[arm] + "</extra>",
          meta: { arm: arm, pending: true },
        });
      }
      cumulativeTraces.push({
        x: x, y: rows.map((r) => r.cumulative), mode: x.length < 60 ? "lines+markers" : "lines", name: LABELS[arm],
        line: { color: COLORS[arm], width: 2 },
      });
    }
    for (const [agent, s] of Object.entries(state.agents)) {
      if (s.tier !== tier || state.xAxis !== "round") continue; // a worker's own curve: by round
      rewardTraces.push({
        x: s.round, y: s.reward, mode: "lines", name: s.label, line: { width: 1, dash: "dot" }, opacity: 0.8,
        meta: { agent: agent },
      });
    }
    const layout = (y) => ({
      margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { title: { text: xName() } },
      yaxis: { title: { text: y } },
      legend: LEGEND,
      showlegend: true, // also for one line: the legend says which arm it is
      height: 300,
    });
    const message = emptyMessage(tier);
    const hasData = cumulativeTraces.length > 0;
    document.getElementById("reward-" + slug(tier) + "-title").textContent = bandTitle(counts);
    showChart("reward-" + slug(tier), hasData, message,
      () => Plotly.react("reward-" + slug(tier), rewardTraces, layout("reward"), PLOT_CONFIG));
    showChart("cumulative-" + slug(tier), hasData, message,
      () => Plotly.react("cumulative-" + slug(tier), cumulativeTraces, layout("sum of per-round means"), PLOT_CONFIG));
    const differenceTraces = differences(tier);
    showChart("difference-" + slug(tier), differenceTraces.length > 0,
      hasData ? "The swarm and a control need a settled round in common." : message,
      () => Plotly.react("difference-" + slug(tier), differenceTraces,
        { ...layout("swarm − control (reward)"), xaxis: { title: { text: "round" } } }, PLOT_CONFIG));
    const heldOut = heldOutTraces(tier);
    showChart("heldout-" + slug(tier), heldOut.length > 0,
      "No held-out evaluation yet: nodes and controls are evaluated every few rounds (the campaign's eval_every).",
      () => Plotly.react("heldout-" + slug(tier), heldOut,
        { ...layout("held-out accuracy"), xaxis: { title: { text: "after round" } }, yaxis: { title: { text: "held-out accuracy" }, range: [0, 1] } },
        PLOT_CONFIG));
  }

  // Held-out accuracy per evaluation (the server's held_out: one unit per swarm or seed, its t
  // interval, the nodes evaluated and those missing, which are never counted as zero).
  function heldOutTraces(tier) {
    const byArm = (state.tables && state.tables.held_out && state.tables.held_out[tier]) || {};
    const traces = [];
    for (const arm of ARMS) {
      const s = byArm[arm];
      if (!s || !s.round.length) continue;
      const banded = s.round.map((_, i) => s.low[i] !== null);
      if (banded.some((b) => b)) {
        traces.push({
          x: s.round, y: s.low, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
          showlegend: false, legendgroup: arm, name: arm + " interval",
        });
        traces.push({
          x: s.round, y: s.high, mode: "lines", line: { width: 0 }, fill: "tonexty",
          fillcolor: BANDS[arm], hoverinfo: "skip", showlegend: false, legendgroup: arm, name: arm + " interval",
        });
      }
      const n = Math.max(...s.n);
      traces.push({
        x: s.round, y: s.accuracy, mode: "lines+markers", legendgroup: arm,
        name: LABELS[arm] + " (n=" + n + (n >= 2 ? ", 95% t interval)" : ", no interval)"),
        line: { color: COLORS[arm], width: 2 },
        customdata: s.round.map((_, i) => [s.n[i], s.nodes[i], s.missing[i]]),
        hovertemplate: "after round %{x}<br>accuracy %{y:.3f}<br>n %{customdata[0]} units, " +
          "%{customdata[1]} nodes, %{customdata[2]} missing<extra>" + LABELS[arm] + "</extra>",
      });
    }
    return traces;
  }

  // The time course of the gain (issue #26): per settled round both arms have, the swarm's mean
  // reward minus the control's, over the same independent units as the summary's gain: swarms
  // for the swarm (each the mean over its nodes, which share a pool), seeds for a control. Its
  // band is the server's (swarm_app/web/estimates.py, difference_band: Welch's 95% t interval,
  // issue #47), drawn as it comes, never computed here; none where an arm has one unit, e.g. a
  // campaign with one swarm. Always by round: the arms' compute differs.
  function differences(tier) {
    const arms = state.series[tier] || {};
    const swarm = arms.swarm;
    if (!swarm) return [];
    const settledSwarm = settledRounds(tier, "swarm");
    const byRound = new Map(swarm.rows.filter((r) => r.round < settledSwarm).map((r) => [r.round, r]));
    const traces = [];
    for (const control of controlsShown((state.tables && state.tables.arms) || [])) {
      const entry = arms[control.arm];
      if (!entry) continue;
      const settled = settledRounds(tier, control.arm);
      const pairs = entry.rows.filter((r) => r.round < settled && byRound.has(r.round)).map((r) => [byRound.get(r.round), r]);
      if (!pairs.length) continue;
      const x = pairs.map((pair) => pair[1].round);
      const d = pairs.map(([a, b]) => a.unitMean - b.unitMean);
      const served = (state.bands[tier] || {})[control.arm] || new Map();
      const band = x.map((r) => served.get(r) || { low: null, high: null });
      const group = "difference-" + control.arm;
      if (band.some((b) => b.low !== null && b.high !== null)) {
        traces.push({
          x: x, y: band.map((b) => b.low), mode: "lines", line: { width: 0 },
          hoverinfo: "skip", showlegend: false, legendgroup: group, name: control.arm + " band",
        });
        traces.push({
          x: x, y: band.map((b) => b.high), mode: "lines", line: { width: 0 },
          fill: "tonexty", fillcolor: BANDS[control.arm], hoverinfo: "skip", showlegend: false, legendgroup: group,
          name: control.arm + " band",
        });
      }
      traces.push({
        x: x, y: d, mode: x.length < 60 ? "lines+markers" : "lines", name: "swarm − " + control.label,
        legendgroup: group, line: { color: COLORS[control.arm], width: 2 },
        meta: { difference: control.arm },
        customdata: pairs.map(([a, b]) => a.units + " swarm" + (a.units === 1 ? "" : "s") + " vs " + b.units + " seed" + (b.units === 1 ? "" : "s")),
        hovertemplate: "round %{x}<br>difference %{y:.3f}<br>n = %{customdata}<extra>swarm − " + control.label + "</extra>",
      });
    }
    return traces;
  }

  function drawAll() {
    ensurePanels();
    for (const tier of state.tiers) drawTier(tier);
  }

  // --- tables -------------------------------------------------------------------------------
  function fillBody(tableId, rows) {
    const body = document.querySelector("#" + tableId + " tbody");
    body.replaceChildren(...rows);
  }

  // A number with its interval, or, from fewer than 2 agents, with the words saying there is
  // none (and greyed, so that it does not look precise).
  function valueCell(value, note, interval) {
    const td = el("td");
    if (note === "-") {
      td.textContent = "–";
      return td;
    }
    // Spaces between the parts (not inside them): a narrow column wraps between, never within.
    td.appendChild(el("span", value, note ? "value imprecise" : "value"));
    if (interval) td.append(" ", el("span", interval, "interval"));
    else if (note) td.append(" ", el("span", note, "no-interval"));
    return td;
  }

  // The controls in the order their gains are shown: the campaign's reference control (the
  // headline) first, then the others.
  function controlsShown(arms) {
    const reference = state.tables ? state.tables.reference : null;
    const controls = arms.filter((a) => a.arm !== "swarm");
    return controls.filter((a) => a.arm === reference).concat(controls.filter((a) => a.arm !== reference));
  }
  function gainHeader(a) {
    const reference = state.tables ? state.tables.reference : null;
    return el("th", "Gain vs " + a.label + (a.arm === reference ? " (headline)" : ""));
  }

  // The summary's columns: one per arm the campaign runs (t.arms), then the swarm's gain over
  // each control among them, the reference first.
  function summaryHeader(arms) {
    const controls = controlsShown(arms);
    const key = arms.map((a) => a.arm).join(",") + "|" + controls.map((a) => a.arm).join(",");
    const head = document.querySelector("#summary thead tr");
    if (head.dataset.arms === key) return;
    head.dataset.arms = key;
    const cells = [el("th", "Tier"), el("th", "H")];
    for (const a of arms) cells.push(el("th", a.label.charAt(0).toUpperCase() + a.label.slice(1)));
    for (const a of controls) cells.push(gainHeader(a));
    head.replaceChildren(...cells);
  }

  // The swarm's n counts swarms (independent), with its nodes beside; a control's counts seeds.
  function unitWords(arm, a) {
    if (arm !== "swarm" || a.nodes === undefined) return "";
    return (a.agents === 1 ? " swarm, " : " swarms, ") + a.nodes + (a.nodes === 1 ? " node" : " nodes");
  }

  function renderSummary(summary, shown) {
    const arms = shown || ARMS.map((arm) => ({ arm: arm, label: LABELS[arm] }));
    summaryHeader(arms);
    const rows = [];
    for (const tier of state.tiers) {
      const s = summary[tier];
      if (!s) continue;
      const tr = el("tr");
      tr.appendChild(el("td", tier));
      tr.appendChild(el("td", s.horizon));
      for (const { arm } of arms) {
        const a = s.arms[arm];
        // An interval only from 2 or more agents; otherwise the server's words say why not.
        const cell = a ? valueCell(fmt(a.cumulative, 2), a.note,
          a.low !== null ? "[" + fmt(a.low, 2) + ", " + fmt(a.high, 2) + "]" : null) : el("td", "no data", "meta");
        if (a) cell.append(" ", el("span", "n=" + a.agents + unitWords(arm, a), "n"));
        // One swarm: its nodes' spread, described as what it is (they share a pool).
        if (a && a.spread) {
          cell.append(" ", el("span", "nodes [" + fmt(a.spread.low, 2) + ", " + fmt(a.spread.high, 2) +
            "]: " + a.spread.note, "spread"));
        }
        cell.dataset.arm = arm;
        tr.appendChild(cell);
      }
      for (const { arm: baseline } of controlsShown(arms)) {
        tr.appendChild(gainCell(s.gains ? s.gains[baseline] : null, baseline));
      }
      rows.push(tr);
    }
    fillBody("summary", rows);
  }

  // The gain per third of H (summary[tier].windows): one row per window, one column per control.
  function gainCell(g, baseline) {
    const known = g && g.value !== null;
    const cell = known ? valueCell(pct(g.value), g.note,
      g.low !== null ? "[" + pct(g.low) + ", " + pct(g.high) + "]" : null) : el("td", "–", "meta");
    if (known) cell.append(" ", el("span", "n=" + g.n[0] + " vs " + g.n[1], "n"));
    cell.dataset.gain = baseline;
    return cell;
  }

  function renderWindows(summary, shown) {
    const controls = controlsShown(shown || []);
    const head = document.querySelector("#windows thead tr");
    head.replaceChildren(el("th", "Tier"), el("th", "Rounds"), ...controls.map(gainHeader));
    const rows = [];
    for (const tier of state.tiers) {
      for (const w of (summary[tier] && summary[tier].windows) || []) {
        const tr = el("tr");
        tr.append(el("td", tier), el("td", w.start + "–" + (w.end - 1)));
        for (const a of controls) tr.appendChild(gainCell(w.gains[a.arm], a.arm));
        rows.push(tr);
      }
    }
    fillBody("windows", rows);
  }

  // Per tier and arm: the mechanism metrics, each with its interval (or the words) and n.
  function renderMechanism(mechanism, keys, shown) {
    const head = document.querySelector("#mechanism thead tr");
    if (head.children.length !== 2 + keys.length) {
      head.replaceChildren(el("th", "Tier"), el("th", "Arm"), ...keys.map((k) => el("th", k.label)));
    }
    const rows = [];
    for (const tier of state.tiers) {
      const m = mechanism ? mechanism[tier] : null;
      if (!m) continue;
      for (const { arm, label } of shown) {
        const values = m.arms[arm];
        if (!values) continue;
        const tr = el("tr");
        tr.dataset.arm = arm;
        tr.appendChild(el("td", tier));
        tr.appendChild(el("td", label));
        for (const { key } of keys) {
          const v = values[key];
          let cell;
          if (!v) cell = el("td", "–", "meta");
          else {
            cell = valueCell(fmt(v.mean, 2), v.note, v.low !== null ? "[" + fmt(v.low, 2) + ", " + fmt(v.high, 2) + "]" : null);
            cell.append(" ", el("span", "n=" + v.agents, "n"));
          }
          cell.dataset.key = key;
          tr.appendChild(cell);
        }
        rows.push(tr);
      }
    }
    if (!rows.length) {
      const none = el("td", "No rounds yet.", "meta");
      none.colSpan = 2 + keys.length;
      const tr = el("tr");
      tr.appendChild(none);
      rows.push(tr);
    }
    fillBody("mechanism", rows);
  }

  function renderPool(pool) {
    const dl = document.getElementById("pool");
    const items = [
      ["Rollouts shared", pool.shared],
      ["In the sampling window", pool.size + " of the last " + pool.window],
      ["Zero-advantage share (window)", pool.zero_advantage_share === null ? "–" : fmt(pool.zero_advantage_share * 100, 1) + " %"],
    ];
    // The external share per tier (their models differ, so do their shares): latest round with
    // a known batch, its interval over the nodes that reported it, and their n.
    const tiers = Object.keys(pool.series);
    if (!tiers.length) items.push(["External share of trained rollouts", "–"]);
    for (const tier of tiers) {
      const e = (pool.external_by_tier || {})[tier];
      let text = "–";
      if (e) {
        text = fmt(e.share * 100, 1) + " %" +
          (e.low !== null ? " [" + fmt(e.low * 100, 1) + ", " + fmt(e.high * 100, 1) + "]" : (e.note ? ", " + e.note : "")) +
          " (n=" + e.agents + ", round " + e.round + ")";
      }
      items.push(["External share of trained rollouts, " + tier, text, "external-" + slug(tier)]);
    }
    const nodes = [];
    for (const [k, v, id] of items) {
      nodes.push(el("dt", k));
      const dd = el("dd", v);
      if (id) dd.id = id;
      nodes.push(dd);
    }
    dl.replaceChildren(...nodes);
    // One pair of lines per tier (their models differ, so do their shares): colour for the
    // measure, dash for the tier.
    const traces = [];
    Object.entries(pool.series).forEach(([tier, s], i) => {
      const mode = s.round.length < 60 ? "lines+markers" : "lines";
      const dash = ["solid", "dash", "dot", "dashdot"][i % 4];
      traces.push({ x: s.round, y: s.zero_advantage, mode: mode, name: tier + ": zero-advantage groups (generated)",
        line: { color: COLORS.swarm, dash: dash } });
      traces.push({ x: s.round, y: s.external, mode: mode, name: tier + ": external rollouts in the trained batch",
        line: { color: COLORS.isolated, dash: dash } });
    });
    const hasData = traces.some((trace) => trace.x.length > 0);
    showChart("pool-chart", hasData, "No swarm rounds yet: the shares start with the first report.", () =>
      Plotly.react("pool-chart", traces, {
        margin: { l: 50, r: 10, t: 10, b: 40 }, height: 280,
        yaxis: { range: [0, 1], tickformat: ".0%", title: { text: "share of groups" } },
        xaxis: { title: { text: "round" } }, legend: LEGEND, showlegend: true,
      }, PLOT_CONFIG));
  }

  function renderControls(controls) {
    if (!controls.length) {
      const none = el("td", "None: this campaign runs no isolated controls (or has not launched).", "meta");
      none.colSpan = 7;
      const tr = el("tr");
      tr.appendChild(none);
      fillBody("controls", [tr]);
      return;
    }
    fillBody("controls", controls.map((c) => {
      const tr = el("tr");
      tr.appendChild(el("td", c.tier));
      tr.appendChild(el("td", c.arm_name && c.arm_name !== c.arm ? c.arm + " (" + c.arm_name + ")" : c.arm));
      tr.appendChild(el("td", c.seed));
      tr.appendChild(el("td", c.status || c.state, "state state-" + c.state));
      const progress = el("td");
      const bar = el("progress");
      bar.max = c.rounds;
      bar.value = c.round;
      progress.appendChild(bar);
      progress.appendChild(el("span", " " + c.round + " / " + c.rounds));
      tr.appendChild(progress);
      tr.appendChild(el("td", c.node_state ? "node " + c.node_state : "no node yet"));
      tr.appendChild(el("td", c.attempts));
      tr.appendChild(el("td", c.error, "error"));
      return tr;
    }));
  }

  function renderWorkers(workers, counts) {
    fillBody("workers", workers.map((w) => {
      const tr = el("tr");
      tr.dataset.agent = w.agent;
      tr.appendChild(el("td", w.name || w.node.slice(0, 12)));
      tr.appendChild(el("td", w.status, "state state-" + w.status.split(" ")[0]));
      tr.appendChild(el("td", w.tier));
      tr.appendChild(el("td", w.hardware));
      tr.appendChild(el("td", w.backend));
      tr.appendChild(el("td", w.round));
      tr.appendChild(el("td", fmt(w.reward)));
      tr.appendChild(el("td", w.rejected));
      return tr;
    }));
    // worker_status_counts: every node in one status, so the parts add up to the total.
    const { total, ...byStatus } = counts || {};
    const parts = Object.entries(byStatus).map(([k, v]) => v + " " + k);
    document.getElementById("worker-counts").textContent = total
      ? "(" + total + (total === 1 ? " worker: " : " workers: ") + parts.join(", ") + ")" : "";
  }

  // The status line: the campaign's state in words (a finished campaign is not "Live.") and
  // whether this page still hears from the server.
  const STATE_WORDS = {
    pending: "Not launched yet.",
    running: "Live.",
    paused: "Paused.",
    completed: "Campaign completed: the results below are final (export at the bottom of the page).",
    stopped: "Campaign stopped: the results below are those up to the stop (export at the bottom of the page).",
    failed: "Campaign failed: the results below are those up to the failure (export at the bottom of the page).",
  };
  function renderStatus() {
    const line = document.getElementById("status-line");
    if (!state.ready) return; // "Loading…" or the load error stays
    let connection = "";
    if (!state.socketOpen) {
      connection = state.socketEverOpen
        ? "Disconnected from the server: reconnecting (attempt " + retry + "); what is shown may be out of date. "
        : "Connecting to the live feed… ";
    }
    let words = STATE_WORDS[state.campaignState] || state.campaignState + ".";
    if (!state.socketOpen && state.campaignState === "running") words = "Running.";
    line.textContent = connection + words + " " + state.loadNote;
    line.dataset.connection = state.socketOpen ? "open" : state.socketEverOpen ? "disconnected" : "connecting";
    line.dataset.campaign = state.campaignState;
  }

  function renderState(campaignState, reason) {
    state.campaignState = campaignState;
    renderStatus();
    // The housekeeping warning matters only while the campaign runs (the server renders it then).
    const housekeeping = document.getElementById("housekeeping-warning");
    if (housekeeping) housekeeping.hidden = campaignState !== "running";
    const badge = document.getElementById("state");
    badge.textContent = campaignState;
    badge.className = "state state-" + campaignState;
    const failure = document.getElementById("failure");
    failure.hidden = campaignState !== "failed";
    if (reason) document.getElementById("failure-reason").textContent = reason;
    // Which actions each state allows comes from the server (lifecycle.ACTIONS), defined once.
    const allowed = config.actions_by_state[campaignState] || [];
    document.querySelectorAll("#actions form[data-action]").forEach((form) => {
      form.hidden = !allowed.includes(form.dataset.action);
    });
  }

  function syncAgentOptions(t) {
    // Workers that joined after the page loaded become selectable too.
    const select = document.getElementById("agent-select");
    const known = new Set(Array.from(select.options).map((o) => o.value));
    const add = (agent, label) => {
      if (known.has(agent)) return;
      const option = el("option", label);
      option.value = agent;
      select.appendChild(option);
      known.add(agent);
    };
    t.workers.forEach((w) => add(w.agent, "worker " + w.node.slice(0, 10) + " (" + w.tier + ")"));
    t.controls.forEach((c) => add(c.agent, c.arm + " " + c.tier + " seed " + c.seed));
  }

  function renderTables(t) {
    const settledBefore = JSON.stringify(state.tables ? state.tables.settled : null);
    state.tables = t;
    state.tiers = t.campaign.tiers;
    syncAgentOptions(t);
    renderState(t.campaign.state, t.campaign.failure_reason);
    if (t.arms) for (const a of t.arms) LABELS[a.arm] = a.label;
    renderSummary(t.summary, t.arms);
    renderWindows(t.summary, t.arms);
    renderMechanism(t.mechanism, t.mechanism_keys || [], t.arms || []);
    renderPool(t.pool);
    renderControls(t.controls);
    renderWorkers(t.workers, t.worker_status_counts);
    ensurePanels();
    // Panels still empty get their words updated (a worker joined, the campaign launched); all
    // are redrawn when more rounds have been reported by every agent.
    const settledMoved = JSON.stringify(t.settled || null) !== settledBefore;
    for (const tier of state.tiers) {
      if (!settledMoved && !document.getElementById("cumulative-" + slug(tier)).hidden) continue;
      drawTier(tier);
    }
  }

  // --- loading and the socket ---------------------------------------------------------------
  async function load() {
    const response = await fetch(config.dashboard, { headers: { Accept: "application/json" } });
    const data = await response.json();
    state.maxPoints = data.max_points;
    state.tiers = data.campaign.tiers;
    setSeries(data.series, data.step, data.difference_bands);
    renderTables(data);
    drawAll();
    state.loadNote = (data.step > 1 ? "Long run: one point per " + data.step + " rounds. " : "") +
      (data.backlog ? data.backlog + " older reports are being aggregated in the background; reload in a minute. " : "") +
      "Loaded in " + data.server_ms + " ms on the server.";
    state.ready = true;
    renderStatus();
  }

  function tooManyPoints() {
    return Object.values(state.series).some((arms) =>
      Object.values(arms).some((e) => e.rows.length > state.maxPoints * 1.2));
  }

  function onPoints(message) {
    const touched = new Set();
    for (const p of message.points) {
      if (upsertPoint(p)) touched.add(p.tier);
      state.pointsReceived += 1;
      state.lastPoint = p;
    }
    for (const b of message.bands || []) {
      upsertBand(b);
      touched.add(b.tier);
    }
    for (const a of message.agents) {
      const s = state.agents[a.agent];
      if (!s) continue;
      s.round.push(a.round);
      s.reward.push(a.reward);
      touched.add(s.tier);
    }
    state.lastPointAt = Date.now();
    if (state.firstPointAt === null && message.points.length) state.firstPointAt = state.lastPointAt;
    if (tooManyPoints()) return load(); // let the server downsample again
    for (const tier of touched) {
      if (!state.tiers.includes(tier)) state.tiers.push(tier);
    }
    ensurePanels();
    touched.forEach(drawTier);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + config.socket);
    socket.onopen = () => {
      state.socketOpen = true;
      state.socketEverOpen = true;
      if (retry > 0) {
        state.reconnects += 1;
        load(); // catch up on what was missed while disconnected
      }
      retry = 0;
      sendWatch();
      renderStatus();
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type in state.messages) state.messages[message.type] += 1;
      if (message.type === "points") onPoints(message);
      else if (message.type === "tables") renderTables(message);
      else if (message.type === "state") renderState(message.state, message.reason);
    };
    socket.onclose = (event) => {
      state.socketOpen = false;
      // 4403: the campaign was made private, or this viewer logged out, lost staff rights or the
      // session expired (docs/web.md); reconnecting would be refused, so say so and stop.
      if (event.code === 4403 || event.code === 4404) {
        const line = document.getElementById("status-line");
        line.textContent = "This campaign is no longer visible to you (it was made private, or you were logged out): reload the page.";
        line.dataset.connection = "forbidden";
        return;
      }
      retry += 1;
      renderStatus(); // the page says it no longer hears from the server
      setTimeout(connect, Math.min(30000, 500 * 2 ** Math.min(retry, 6)));
    };
  }

  function sendWatch() {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "watch", agents: Object.keys(state.agents) }));
    }
  }

  async function selectAgents() {
    const picked = Array.from(document.getElementById("agent-select").selectedOptions).slice(0, 8);
    const next = {};
    for (const option of picked) {
      const agent = option.value;
      if (state.agents[agent]) {
        next[agent] = state.agents[agent];
        continue;
      }
      const response = await fetch(config.agent + "?agent=" + encodeURIComponent(agent));
      const s = await response.json();
      next[agent] = { tier: s.tier, label: option.textContent, round: s.round, reward: s.reward };
    }
    state.agents = next;
    sendWatch();
    drawAll();
  }

  document.getElementById("agent-select").addEventListener("change", selectAgents);
  load().then(connect, (error) => {
    document.getElementById("status-line").textContent = "Could not load the dashboard: " + error;
    connect();
  });
})();
