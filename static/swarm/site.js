/* Site-wide behaviour, without inline scripts (the Content-Security-Policy allows none):
 * a form with data-confirm asks before it submits (Stop, which is final; Revoke), and a button
 * with data-copy="ID" copies the text of element ID (join lines, tokens). */
(function () {
  "use strict";
  document.addEventListener("submit", (event) => {
    const message = event.target.dataset ? event.target.dataset.confirm : undefined;
    if (message && !window.confirm(message)) event.preventDefault();
  });
  document.addEventListener("click", (event) => {
    const button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    const text = source.textContent.trim();
    const done = () => {
      button.textContent = "Copied";
      button.dataset.copied = "1";
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => selectText(source));
    } else {
      selectText(source);  // plain http: select it for Ctrl-C
      try { if (document.execCommand("copy")) done(); } catch (error) { /* left selected */ }
    }
  });
  function selectText(element) {
    const range = document.createRange();
    range.selectNodeContents(element);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
})();
