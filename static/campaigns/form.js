/* The campaign form: the task lines are the one source of truth. Choosing a preset writes its
 * lines into the textarea; editing the lines so that they differ from the chosen preset's
 * switches the choice to "custom tasks" (the server applies the same rule, with or without
 * this script: what is typed is what is stored). */
(function () {
  "use strict";
  // After an invalid submit the summary above the form lists every problem, each linking to its
  // field: the first invalid field's control takes the focus (and the view), and a link focuses
  // its field's control rather than only scrolling to it. A problem of the whole form, with no
  // field, leaves the focus on the summary.
  const problems = document.getElementById("form-errors");
  const control = (field) => (field ? field.querySelector("input:not([type=hidden]), select, textarea") : null);
  if (problems) {
    (control(document.querySelector(".campaign-form .field.has-error")) || problems).focus();
    problems.addEventListener("click", (event) => {
      const link = event.target.closest("a[href^='#field-']");
      const target = link ? control(document.getElementById(link.getAttribute("href").slice(1))) : null;
      if (!target) return;
      event.preventDefault();
      target.focus();
    });
  }
  // The sizing line under the control seeds: what R swarms against S seeds can show, from the
  // server (swarm_app/web/sizing.py) whenever the swarms, the seeds or the tiers change.
  const sizing = document.getElementById("sizing");
  const replicates = document.getElementById("id_replicates");
  const seeds = document.getElementById("id_control_seeds");
  if (sizing && replicates && seeds) {
    let asked = 0;
    const update = () => {
      const tiers = document.querySelectorAll("input[name=tiers]:checked").length;
      const query = new URLSearchParams({ replicates: replicates.value, seeds: seeds.value, tiers: tiers });
      const ticket = ++asked;
      fetch(sizing.dataset.url + "?" + query, { credentials: "same-origin" })
        .then((response) => (response.ok ? response.json() : null))
        .then((design) => {
          if (!design || ticket !== asked) return; // a newer answer is on its way
          sizing.textContent = design.text;
          sizing.classList.toggle("sizing-warning", !design.can_decide);
        })
        .catch(() => {});
    };
    [replicates, seeds].forEach((input) => input.addEventListener("input", update));
    document.querySelectorAll("input[name=tiers]").forEach((input) => input.addEventListener("change", update));
  }
  const lines = JSON.parse(document.getElementById("task-preset-lines").textContent);
  const choice = document.getElementById("id_task_preset");
  const text = document.getElementById("id_custom_tasks");
  if (!choice || !text) return;
  const same = (a, b) => a.trim().replace(/\r\n/g, "\n") === b.trim();
  choice.addEventListener("change", () => {
    if (choice.value in lines) text.value = lines[choice.value];
  });
  text.addEventListener("input", () => {
    if (choice.value in lines && !same(text.value, lines[choice.value])) choice.value = "custom";
    else if (choice.value === "custom") {
      for (const [name, preset] of Object.entries(lines)) if (same(text.value, preset)) choice.value = name;
    }
  });
})();
