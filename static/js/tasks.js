// Task page helpers; everything works without them (server-rendered tabs, links, forms).
(function () {
  // A select marked data-autosubmit submits its form on change (the version picker).
  document.addEventListener("change", function (ev) {
    var el = ev.target;
    if (el && el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.submit();
  });

  // A link to a line (#f-solution-solve-sh-12) inside a collapsed <details> opens it and scrolls there.
  function revealTarget() {
    if (!location.hash) return;
    var target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!target) return;
    for (var el = target.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
    target.scrollIntoView({ block: "center" });
  }
  window.addEventListener("hashchange", revealTarget);
  window.addEventListener("load", revealTarget);

  // Keep the newest output of a running re-check in view as the panel refreshes.
  document.addEventListener("htmx:afterSettle", function (ev) {
    if (!ev.target || ev.target.id !== "recheck-panel") return;
    ev.target.querySelectorAll("li.running pre.terminal").forEach(function (pre) { pre.scrollTop = pre.scrollHeight; });
  });
})();
