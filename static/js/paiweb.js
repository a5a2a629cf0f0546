// Small progressive enhancements for every page. Everything works without this file.
(function () {
  "use strict";

  // <select data-autosubmit> submits its form on change (the workspace and language
  // switchers). A choice made with the keyboard waits for Enter, or for the focus to leave
  // the list (Escape takes it back): an arrow key changes a closed select at once, so the
  // first ArrowDown switched the workspace and reloaded the page, and a keyboard user could
  // never reach the third workspace without going through the second.
  var keyed = null;
  function autosubmitOf(target) {
    return target && target.closest ? target.closest("select[data-autosubmit]") : null;
  }
  function submitChoice(select) {
    select.removeAttribute("data-pending");
    if (select.form) select.form.requestSubmit();
  }
  document.addEventListener("pointerdown", function () { keyed = null; }, true);
  document.addEventListener("focusin", function (event) {
    var select = autosubmitOf(event.target);
    if (select && !select.hasAttribute("data-pending")) {
      select.setAttribute("data-chosen", select.value);
    }
  });
  document.addEventListener("keydown", function (event) {
    var select = autosubmitOf(event.target);
    if (!select) return;
    if (event.key === "Enter" && select.hasAttribute("data-pending")) {
      event.preventDefault();
      submitChoice(select);
    } else if (event.key === "Escape" && select.hasAttribute("data-pending")) {
      select.value = select.getAttribute("data-chosen");
      select.removeAttribute("data-pending");
    } else if (event.key !== "Tab") {
      keyed = select;
    }
  });
  document.addEventListener("focusout", function (event) {
    var select = autosubmitOf(event.target);
    if (select && select.hasAttribute("data-pending")) submitChoice(select);
  });
  document.addEventListener("change", function (event) {
    var select = autosubmitOf(event.target);
    if (!select || !select.form) return;
    if (keyed === select) select.setAttribute("data-pending", "");
    else submitChoice(select);
  });

  // <form data-guard-unsaved> (the create form, What if): once something was typed into it,
  // leaving the page any other way than by sending it (a switcher, a link, closing the tab)
  // asks first, as the browser does, so a half-written job is not lost to a stray click.
  var unsaved = null, sent = false;
  document.addEventListener("input", function (event) {
    var form = event.target.closest ? event.target.closest("form[data-guard-unsaved]") : null;
    if (form) { unsaved = form; sent = false; }
  });
  document.addEventListener("submit", function (event) {
    if (event.target === unsaved) sent = true;
  });
  window.addEventListener("beforeunload", function (event) {
    if (!unsaved || sent || !document.body.contains(unsaved)) return;
    event.preventDefault();
    event.returnValue = "";
  });

  // <form data-confirm="Really?"> asks before submitting (the Stop button).
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  // The browser's time zone, for pages to show times in (unless the user saved one): told
  // to the server in a cookie; the first page it was not known yet is shown again in it.
  try {
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    var root = document.documentElement;
    var told = document.cookie.split("; ").some(function (c) { return c === "paiweb_tz=" + encodeURIComponent(zone); });
    if (zone && !told) {
      document.cookie = "paiweb_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax";
      // only a page that shows times (never one being typed into, like the sign-in
      // form), and once per tab: without cookies, or with a zone the server does not
      // know, it would loop
      if (root.dataset.tzSource === "server" && root.dataset.tz !== zone &&
          document.querySelector("time") &&
          !window.sessionStorage.getItem("paiweb_tz_reloaded")) {
        window.sessionStorage.setItem("paiweb_tz_reloaded", "1");
        window.location.reload();
      }
    }
  } catch (e) { /* no Intl: the server's zone it is */ }

  // <table class="cards">: each cell names its column (data-label, from the table's
  // header or its data-labels), which a phone's stylesheet shows beside it, a row becoming
  // a card; again after htmx swaps new rows in.
  function labelCards(root) {
    root.querySelectorAll("table.cards").forEach(function (table) {
      var labels = table.dataset.labels ? table.dataset.labels.split(",") :
        Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
          return th.textContent.trim();
        });
      table.querySelectorAll("tbody tr").forEach(function (row) {
        var column = 0;
        Array.prototype.forEach.call(row.children, function (cell) {
          var span = cell.colSpan || 1;
          if (span === 1 && labels[column] && !cell.hasAttribute("data-label")) {
            cell.setAttribute("data-label", labels[column]);
          }
          column += span;
        });
      });
    });
  }
  document.addEventListener("htmx:afterSettle", function (event) { labelCards(event.target); });

  // A filter form (<form role="search">, whose changes htmx pushes as URLs) shows the
  // filters of the page Back or Forward brings back: htmx restores the list from its history
  // snapshot, where the controls hold what the page first loaded with, so the list said
  // "Succeeded" while the select said "Any status" (and the next change dropped it).
  document.addEventListener("htmx:historyRestore", function () {
    var params = new URLSearchParams(window.location.search);
    document.querySelectorAll("form[role=search]").forEach(function (form) {
      Array.prototype.forEach.call(form.elements, function (field) {
        if (!field.name || field.type === "submit" || field.type === "button") return;
        if (field.type === "checkbox" || field.type === "radio") {
          field.checked = params.getAll(field.name).indexOf(field.value) !== -1;
        } else {
          field.value = params.get(field.name) || "";
          if (field.tagName === "SELECT" && field.selectedIndex === -1) field.selectedIndex = 0;
        }
      });
    });
  });

  // A poll (hx-trigger "every …") does not swap away text the reader is selecting (to copy
  // a pod's id or an event's message): the job page's part is swapped every 3 s, which
  // dropped the selection; the poll after the selection ends brings what changed.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var trigger = event.detail.elt && event.detail.elt.getAttribute("hx-trigger");
    if (!trigger || trigger.indexOf("every ") === -1) return;
    if (event.detail.xhr && event.detail.xhr.status === 286) return;  // the last one: swap it
    var selection = window.getSelection && window.getSelection();
    if (!selection || selection.isCollapsed || !selection.rangeCount) return;
    var target = event.detail.target;
    if (target && target.contains(selection.getRangeAt(0).commonAncestorContainer)) {
      event.detail.shouldSwap = false;
    }
  });

  // A poll or an action that cannot reach the server, or that it fails to answer (5xx),
  // says so (#connection-lost) instead of leaving the page silently out of date; the next
  // answer takes the notice away.
  function connectionLost(lost) {
    var notice = document.getElementById("connection-lost");
    if (notice) notice.hidden = !lost;
  }
  document.addEventListener("htmx:sendError", function () { connectionLost(true); });
  document.addEventListener("htmx:responseError", function (event) {
    if (event.detail.xhr && event.detail.xhr.status >= 500) connectionLost(true);
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) connectionLost(false);
  });

  // A read-only field to copy from (a new access key's id and secret) is selected whole
  // when it takes the focus.
  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("input[data-select-on-focus]")) {
      event.target.select();
    }
  });

  // Buttons only needed without JavaScript (the workspace switcher's "Switch").
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-hide-with-js]").forEach(function (el) {
      el.hidden = true;
    });
    labelCards(document);
  });
})();
