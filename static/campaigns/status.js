/* The status page: refreshes live worker counts and totals every few seconds. */
(function () {
  "use strict";
  async function refresh() {
    try {
      const response = await fetch("/api/status", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const data = await response.json();
      for (const [key, value] of Object.entries(data.totals)) {
        const node = document.querySelector('[data-total="' + key + '"]');
        if (node) node.textContent = value;
      }
      for (const row of data.campaigns) {
        const tr = document.querySelector('tr[data-campaign="' + row.id + '"]');
        if (!tr) continue;
        tr.querySelectorAll("[data-field]").forEach((cell) => {
          cell.textContent = row[cell.dataset.field];
          if (cell.dataset.field === "state") cell.className = "state state-" + row.state;
        });
      }
    } catch (error) {
      /* offline for a moment: try again at the next tick */
    }
  }
  setInterval(refresh, 5000);
})();
