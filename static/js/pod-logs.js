// The pod log page: follow (stay at the newest line while output arrives, until the reader
// scrolls up; back at the bottom, it follows again) and search (only the lines containing
// the text, with their count). Without JavaScript the page still shows and polls the log.
(function () {
  "use strict";

  function setup() {
    var text = document.getElementById("log-text");
    var tools = document.getElementById("log-tools");
    if (!text || !tools) return;
    var follow = document.getElementById("log-follow-toggle");
    var search = document.getElementById("log-search");
    var matches = document.getElementById("log-matches");
    var count = document.getElementById("log-search-count");
    tools.hidden = false;

    function atBottom() {
      return text.scrollHeight - text.scrollTop - text.clientHeight < 4;
    }
    function toBottom() {
      text.scrollTop = text.scrollHeight;
    }
    function filter() {
      var needle = search.value;
      if (!needle) {
        matches.hidden = true;
        text.hidden = false;
        count.textContent = "";
        if (follow.checked) toBottom();
        return;
      }
      var lines = text.textContent.split("\n");
      if (lines.length && lines[lines.length - 1] === "") lines.pop();  // the final newline
      var found = lines.filter(function (line) { return line.indexOf(needle) !== -1; });
      matches.textContent = found.join("\n");
      matches.hidden = false;
      text.hidden = true;
      count.textContent = (count.dataset.format || "{found} of {total} lines")
        .replace("{found}", found.length).replace("{total}", lines.length);
      if (follow.checked) matches.scrollTop = matches.scrollHeight;
    }

    text.addEventListener("scroll", function () { follow.checked = atBottom(); });
    follow.addEventListener("change", function () { if (follow.checked) toBottom(); });
    search.addEventListener("input", filter);
    document.addEventListener("htmx:oobAfterSwap", function () {
      if (search.value) filter();
      else if (follow.checked) toBottom();
    });
    toBottom();
  }

  document.addEventListener("DOMContentLoaded", setup);
})();
