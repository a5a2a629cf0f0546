// The create-job form: show the sections that follow the choices made so far, and offer the
// roles of the chosen job type.
//
// An element with data-show-when="name=value|value;other=value" is shown only while every
// condition holds (a checkbox reads "on" when checked, "" when not). The inputs inside a
// hidden element are disabled so the browser does not submit them: what is not shown is
// not asked for. Without JavaScript every section stays visible and the server decides.
(function () {
  "use strict";

  var form = document.getElementById("job-form");
  if (!form) return;

  function valueOf(name) {
    var el = form.elements.namedItem(name);
    if (!el) return "";
    if (typeof RadioNodeList !== "undefined" && el instanceof RadioNodeList) {
      for (var i = 0; i < el.length; i++) if (el[i].checked && !el[i].disabled) return el[i].value;
      return "";
    }
    if (el.type === "checkbox") return el.checked ? "on" : "";
    return el.value;
  }

  function holds(expression) {
    return expression.split(";").every(function (condition) {
      var at = condition.indexOf("=");
      var name = condition.slice(0, at).trim();
      var wanted = condition.slice(at + 1).split("|");
      return wanted.indexOf(valueOf(name)) !== -1;
    });
  }

  // Keep a radio group answered: if its checked option got hidden, take the first visible one.
  function repairRadios() {
    form.querySelectorAll("input[type=radio]:checked:disabled").forEach(function (radio) {
      var group = form.querySelectorAll('input[type=radio][name="' + radio.name + '"]');
      for (var i = 0; i < group.length; i++) {
        if (!group[i].disabled) { group[i].checked = true; return; }
      }
    });
  }

  // Offer only the instance types and quotas of the chosen resource type.
  // Returns the selects whose choice was cleared, so their dependants can refresh.
  function filterOptions() {
    var type = valueOf("resource_type");
    var cleared = [];
    form.querySelectorAll("option[data-resource-type]").forEach(function (option) {
      var off = option.getAttribute("data-resource-type") !== type;
      option.hidden = off;
      option.disabled = off;
      if (off && option.selected) {
        option.parentElement.value = "";
        cleared.push(option.parentElement);
      }
    });
    return cleared;
  }

  // Offer each role row the chosen job type's roles (the page's #job-role-types, from the
  // same table the server checks). A row keeps its role while the type has it and no row
  // above took it; otherwise it takes the first role no row above holds.
  var roleTypes = JSON.parse(document.getElementById("job-role-types").textContent);

  function offerRoles() {
    var roles = roleTypes[valueOf("job_type")];
    if (!roles) return;
    var taken = [];
    form.querySelectorAll("select[name$='-role_type']").forEach(function (select) {
      var free = roles.filter(function (r) { return taken.indexOf(r) === -1; });
      var role = free.indexOf(select.value) !== -1 ? select.value : free[0] || roles[0];
      select.replaceChildren.apply(select, roles.map(function (r) {
        return new Option(r, r, false, r === role);
      }));
      taken.push(role);
    });
  }

  function update() {
    var cleared = filterOptions();
    for (var pass = 0; pass < 3; pass++) {  // conditions depend on each other; settle them
      form.querySelectorAll("[data-show-when]").forEach(function (el) {
        el.hidden = !holds(el.getAttribute("data-show-when"));
      });
      form.querySelectorAll("input, select, textarea").forEach(function (input) {
        if (input.type === "hidden") return;
        input.disabled = input.closest("[data-show-when][hidden]") !== null;
      });
      repairRadios();
    }
    cleared.forEach(function (select) {  // e.g. the role's price line (htmx listens)
      select.dispatchEvent(new Event("change", { bubbles: true }));
    });
  }

  form.addEventListener("change", function (event) {
    if (event.target.name === "job_type") offerRoles();
    update();
  });
  update();

  // Each shown role's spot price panel is asked again every 30 s (its hx-trigger listens for
  // price-tick); a hidden one is not. Here rather than in an htmx filter: filters are eval'd,
  // which the Content-Security-Policy forbids.
  window.setInterval(function () {
    form.querySelectorAll(".market-panel").forEach(function (panel) {
      if (panel.offsetParent !== null && window.htmx) window.htmx.trigger(panel, "price-tick");
    });
  }, 30000);

  // A rejected form: the summary of what to fix takes the focus (a screen reader reads it,
  // the page scrolls to it), and each of its links puts the cursor in the input it names.
  var summary = document.getElementById("form-errors");
  if (summary) {
    summary.focus();
    summary.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-focus]");
      if (!link) return;
      var input = document.getElementById(link.getAttribute("data-focus"));
      if (!input) return;
      event.preventDefault();
      input.scrollIntoView({ block: "center" });
      input.focus();
    });
  }
})();
