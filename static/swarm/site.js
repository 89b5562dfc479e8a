/* Site-wide behaviour, without inline scripts (the Content-Security-Policy allows none):
 * a form with data-confirm asks before it submits (Stop, which is final). */
(function () {
  "use strict";
  document.addEventListener("submit", (event) => {
    const message = event.target.dataset ? event.target.dataset.confirm : undefined;
    if (message && !window.confirm(message)) event.preventDefault();
  });
})();
