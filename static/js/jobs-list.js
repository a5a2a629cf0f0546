// The job list: clocks that keep counting between polls, "select all", and ticked rows
// that survive the table being replaced by a poll. Everything works without this file.
(function () {
  "use strict";

  // As the server's `duration` filter writes it: 45s, 3m 05s, 2h 03m, 4d 2h.
  function duration(total) {
    total = Math.max(Math.floor(total), 0);
    var days = Math.floor(total / 86400), rest = total % 86400;
    var hours = Math.floor(rest / 3600), minutes = Math.floor((rest % 3600) / 60);
    var secs = rest % 60;
    function two(n) { return n < 10 ? "0" + n : String(n); }
    if (days) return days + "d " + hours + "h";
    if (hours) return hours + "h " + two(minutes) + "m";
    if (minutes) return minutes + "m " + two(secs) + "s";
    return secs + "s";
  }

  var renderedAt = Date.now();  // when the shown table arrived: its clocks count from then

  function tick() {
    var elapsed = (Date.now() - renderedAt) / 1000;
    document.querySelectorAll("#job-table [data-clock-live]").forEach(function (cell) {
      cell.textContent = duration(Number(cell.getAttribute("data-clock")) + elapsed);
    });
  }
  setInterval(tick, 1000);

  var ticked = [];
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "job-table") {
      ticked = Array.prototype.map.call(
        document.querySelectorAll("#job-table input[name=job_ids]:checked"),
        function (box) { return box.value; }
      );
    }
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target && event.detail.target.id === "job-table") {
      renderedAt = Date.now();
      document.querySelectorAll("#job-table input[name=job_ids]").forEach(function (box) {
        box.checked = ticked.indexOf(box.value) !== -1;
      });
    }
  });

  document.addEventListener("change", function (event) {
    if (!event.target.matches("[data-select-all]")) return;
    document.querySelectorAll("#job-table input[name=job_ids]").forEach(function (box) {
      box.checked = event.target.checked;
    });
  });
})();
