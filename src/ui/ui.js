// lockstep's dashboard: live updates without a reload. The server sends
// `event: snapshot` (Server-Sent Events, /events) after every pass; the page
// fetches itself again and swaps its <main id="live">. Without JavaScript
// (or EventSource) the page is the same, only not live. No inline script:
// the Content-Security-Policy allows this file only (docs/ui.md).
(function () {
  "use strict";
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;
  var live = document.getElementById("live");
  if (!live) return;
  var busy = false;
  var again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("live");
        if (!fresh) return;
        // Keep open <details> open across the swap.
        var open = {};
        live.querySelectorAll("details[open] > summary").forEach(function (s) { open[s.textContent] = true; });
        fresh.querySelectorAll("details > summary").forEach(function (s) {
          if (open[s.textContent]) s.parentNode.setAttribute("open", "");
        });
        live.replaceWith(fresh);
        live = fresh;
        var seq = doc.getElementById("seq");
        var mine = document.getElementById("seq");
        if (seq && mine) mine.textContent = seq.textContent;
        document.documentElement.setAttribute("data-live", "on");
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource("/events");
  source.addEventListener("hello", function () {
    document.documentElement.setAttribute("data-live", "on");
  });
  source.addEventListener("snapshot", refresh);
})();
