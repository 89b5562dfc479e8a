/* Reward curves on a volunteer's or a node's page: each node's verified reward by round beside its
 * swarm's mean (the data is in <script type="application/json" id="curves-data">; no inline script
 * runs under the Content-Security-Policy). Text reaches plotly only as numbers and the server's
 * fixed trace names. */
(function () {
  "use strict";
  const source = document.getElementById("curves-data");
  if (!source || typeof Plotly === "undefined") return;
  const curves = JSON.parse(source.textContent);
  document.querySelectorAll("[data-curve]").forEach((box) => {
    const curve = curves[Number(box.dataset.curve)];
    if (!curve) return;
    if (!curve.rounds.length) {
      box.classList.add("empty");
      box.textContent = "No rounds reported yet.";
      return;
    }
    Plotly.newPlot(box, [
      { x: curve.rounds, y: curve.reward, name: "this node", mode: "lines+markers" },
      { x: curve.swarm_rounds, y: curve.swarm_mean, name: "swarm mean", mode: "lines", line: { dash: "dot" } },
    ], {
      margin: { l: 50, r: 10, t: 10, b: 40 }, height: 280,
      xaxis: { title: { text: "round" } }, yaxis: { title: { text: "verified reward" } },
      legend: { orientation: "h" },
    }, { responsive: true, displaylogo: false });
  });
})();
