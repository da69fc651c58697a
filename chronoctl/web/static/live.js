// chrono web console: the page's only script (no inline script: the CSP forbids it).
// 1. A running run's output follows live: poll the run's /live endpoint and append the
//    text as text (textContent, never HTML).
// 2. Pages with data-refresh="N" swap in a fresh copy of <main> every N seconds, without
//    reloading the page (skipped while a form field has the focus).
"use strict";
(function () {
  function follow(pre) {
    var url = pre.getAttribute("data-live");
    var attempt = pre.getAttribute("data-attempt");
    var offset = 0;
    var note = document.getElementById("live-note");
    function poll() {
      fetch(url + "?attempt=" + encodeURIComponent(attempt) + "&offset=" + offset, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (d) {
          if (d.text) { pre.appendChild(document.createTextNode(d.text)); pre.scrollTop = pre.scrollHeight; }
          offset = d.offset;
          var state = document.getElementById("run-state");
          if (state) { state.textContent = d.state; state.className = "pill s-" + d.state; }
          if (note) { note.textContent = d.note || (d.done ? "ended: " + d.state : "following"); }
          if (d.state !== "running" && !d.done) { setTimeout(poll, 200); return; }
          if (!d.done) { setTimeout(poll, 1000); }
        })
        .catch(function () { setTimeout(poll, 3000); });
    }
    poll();
  }
  function refresh(seconds) {
    setInterval(function () {
      var a = document.activeElement;
      if (a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA")) { return; }
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) { return; }
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById("content");
          var main = document.getElementById("content");
          if (fresh && main) { main.replaceWith(document.importNode(fresh, true)); }
        })
        .catch(function () {});
    }, seconds * 1000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("live-output");
    if (pre) { follow(pre); }
    var n = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
    if (n > 0) { refresh(n); }
  });
})();
