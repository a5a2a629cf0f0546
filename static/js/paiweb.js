// Small progressive enhancements for every page. Everything works without this file.
(function () {
  "use strict";

  // <select data-autosubmit> submits its form on change (the workspace switcher).
  document.addEventListener("change", function (event) {
    var select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) select.form.requestSubmit();
  });

  // <form data-confirm="Really?"> asks before submitting (the Stop button).
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  // Buttons only needed without JavaScript (the workspace switcher's "Switch").
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-hide-with-js]").forEach(function (el) {
      el.hidden = true;
    });
  });
})();
