// Upgrades the server-drawn SVG price charts (figure[data-price-chart]) to interactive
// uPlot charts with a cursor that reads out every line. Without JavaScript, or without
// uPlot, the SVG stays: this file only enhances.
(function () {
  "use strict";

  function money(u, value) {
    return value == null ? "—" : "¥" + value.toFixed(4) + "/h";
  }

  // "12-01 19:05" (or "19:05") in that zone, whatever the browser's own locale
  function clock(ts, zone, withDate) {
    var parts = {};
    new Intl.DateTimeFormat("en-GB", {
      timeZone: zone, month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
      hourCycle: "h23"
    }).formatToParts(new Date(ts * 1e3)).forEach(function (p) { parts[p.type] = p.value; });
    var time = parts.hour + ":" + parts.minute;
    return withDate ? parts.month + "-" + parts.day + " " + time : time;
  }

  function upgrade(figure) {
    if (typeof window.uPlot !== "function" || figure.dataset.upgraded) return;
    var source = document.getElementById(figure.dataset.priceChart);
    if (!source) return;
    var data = JSON.parse(source.textContent);
    var stepped = window.uPlot.paths.stepped({ align: 1 });
    // the page's zone (the reader's: <html data-tz>), one 24-hour format as the tables
    var zone = document.documentElement.dataset.tz || "Etc/UTC";
    // the time column's name in the page's language (the template's data-time-label)
    var time = figure.dataset.timeLabel || "Time";
    var series = [{ label: time + " (" + zone + ")", value: "{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}" }];
    var columns = [data.t];
    data.series.forEach(function (s) {
      series.push({
        label: s.label, stroke: s.colour, width: s.kind === "price" ? 2 : 1.5,
        dash: s.dash ? s.dash.split(" ").map(Number) : undefined,
        paths: stepped, value: money, spanGaps: false
      });
      columns.push(s.values);
    });
    var svg = figure.querySelector("svg");
    var width = figure.clientWidth || 720;
    var holder = document.createElement("div");
    holder.className = "uplot-holder";
    figure.insertBefore(holder, svg);
    new window.uPlot({
      width: width, height: 260, series: series,
      // the server's scale: the moving lines, not the far-off floor and original price
      scales: data.y ? { y: { range: function () { return data.y; } } } : undefined,
      tzDate: function (ts) {
        return window.uPlot.tzDate(new Date(ts * 1e3), zone);
      },
      axes: [{ values: function (u, ticks) {
        // the date too once ticks span days
        var long = ticks.length > 1 && ticks[ticks.length - 1] - ticks[0] > 86400;
        return ticks.map(function (ts) { return clock(ts, zone, long); });
      } }, { values: function (u, ticks) {
        // enough decimals that neighbouring ticks differ (a price moving by fen)
        var step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
        var places = step >= 0.1 ? 2 : step >= 0.01 ? 3 : 4;
        return ticks.map(function (v) { return "¥" + v.toFixed(places); });
      }, size: 72 }]
    }, columns, holder);
    svg.style.display = "none";
    var legend = figure.querySelector(".chart-legend");
    if (legend) legend.hidden = true;
    figure.dataset.upgraded = "1";
  }

  function upgradeAll(root) {
    (root || document).querySelectorAll("figure[data-price-chart]").forEach(upgrade);
  }

  document.addEventListener("DOMContentLoaded", function () { upgradeAll(document); });
  document.addEventListener("htmx:afterSettle", function (event) { upgradeAll(event.target); });
})();
