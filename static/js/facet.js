// Draws every plotly figure whose JSON sits in a <script type="application/json"> on the page,
// and makes clickable charts open the filtered list each point names in its customdata.
function facetDrawCharts() {
  if (typeof Plotly === "undefined") return;
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    if (el.dataset.drawn) return;
    var source = document.getElementById(el.dataset.figure);
    if (!source) return;
    var fig = JSON.parse(source.textContent);
    Plotly.newPlot(el, fig.data, fig.layout, { responsive: true, displaylogo: false });
    el.dataset.drawn = "1";
    if (el.dataset.clickable) {
      el.on("plotly_click", function (ev) {
        var point = ev.points && ev.points[0];
        if (point && typeof point.customdata === "string" && point.customdata.charAt(0) === "/") {
          window.location.href = point.customdata;
        }
      });
    }
  });
}
window.addEventListener("load", facetDrawCharts);
document.addEventListener("htmx:afterSettle", facetDrawCharts);

// A <select data-autosubmit> submits its form when changed: the Content-Security-Policy allows no
// inline handlers (onchange=...), so the behaviour lives here.
document.addEventListener("change", function (ev) {
  var el = ev.target;
  if (el && el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.submit();
});

// A form with data-confirm asks first (undo, and other steps that are not taken back lightly); the
// question is the attribute's text. Without JavaScript the form submits as it is.
document.addEventListener("submit", function (ev) {
  var form = ev.target;
  if (form && form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) ev.preventDefault();
}, true);
