/* Curves on a volunteer's or a node's page: each node's verified reward by round beside its
 * swarm's mean, and its held-out accuracy per evaluation beside its tier's arms (the swarm's mean
 * over its swarms and each control's over its seeds, with their 95% t intervals; an evaluation it
 * missed is a gap, never a zero). The data is in <script type="application/json"
 * id="curves-data">; no inline script runs under the Content-Security-Policy. Text reaches plotly
 * only as numbers and the server's fixed trace names (never a volunteer's name). */
(function () {
  "use strict";
  const source = document.getElementById("curves-data");
  if (!source || typeof Plotly === "undefined") return;
  const curves = JSON.parse(source.textContent);
  const COLORS = { swarm: "#2f6fde", isolated: "#d9822b", filtered: "#2a9d8f", self: "#9b5de5", dyn: "#c0392b" };
  const BANDS = {
    swarm: "rgba(47,111,222,0.15)", isolated: "rgba(217,130,43,0.15)", filtered: "rgba(42,157,143,0.15)",
    self: "rgba(155,93,229,0.15)", dyn: "rgba(192,57,43,0.15)",
  };
  const CONFIG = { responsive: true, displaylogo: false };
  // Above the plot, as on the campaign page: at 390 px a legend below it covers the axis title.
  const LEGEND = { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" };

  function empty(box, text) {
    box.classList.add("empty");
    box.textContent = text;
  }

  document.querySelectorAll("[data-curve]").forEach((box) => {
    const curve = curves[Number(box.dataset.curve)];
    if (!curve) return;
    if (!curve.rounds.length) {
      empty(box, "No rounds reported yet.");
      return;
    }
    Plotly.newPlot(box, [
      { x: curve.rounds, y: curve.reward, name: "this node", mode: "lines+markers" },
      { x: curve.swarm_rounds, y: curve.swarm_mean, name: "swarm mean", mode: "lines", line: { dash: "dot" } },
    ], {
      margin: { l: 50, r: 10, t: 10, b: 40 }, height: 280,
      xaxis: { title: { text: "round" } }, yaxis: { title: { text: "verified reward" } },
      legend: LEGEND,
    }, CONFIG);
  });

  function armTraces(arm) {
    const traces = [];
    if (arm.low.some((v) => v !== null)) {
      traces.push({ x: arm.round, y: arm.low, mode: "lines", line: { width: 0 }, hoverinfo: "skip",
        showlegend: false, legendgroup: arm.arm, name: arm.label });
      traces.push({ x: arm.round, y: arm.high, mode: "lines", line: { width: 0 }, fill: "tonexty",
        fillcolor: BANDS[arm.arm], hoverinfo: "skip", showlegend: false, legendgroup: arm.arm, name: arm.label });
    }
    traces.push({ x: arm.round, y: arm.accuracy, name: arm.label, mode: "lines", legendgroup: arm.arm,
      line: { color: COLORS[arm.arm], dash: "dot" } });
    return traces;
  }

  document.querySelectorAll("[data-held-out]").forEach((box) => {
    const curve = curves[Number(box.dataset.heldOut)];
    const held = curve && curve.held_out;
    if (!held) return;
    if (!held.rounds.length) {
      empty(box, "No evaluation yet: nodes are evaluated every few rounds (the campaign's eval_every).");
      return;
    }
    const traces = held.arms.flatMap(armTraces);
    traces.push({ x: held.rounds, y: held.accuracy, name: "this node", mode: "lines+markers",
      connectgaps: false, line: { color: "#222", width: 2 }, marker: { color: "#222", size: 7 } });
    Plotly.newPlot(box, traces, {
      margin: { l: 50, r: 10, t: 10, b: 40 }, height: 280,
      xaxis: { title: { text: "after round" } }, yaxis: { title: { text: "held-out accuracy" }, range: [0, 1] },
      legend: LEGEND,
    }, CONFIG);
  });
})();
