// The console's only script of its own: the CSRF header and ETags for htmx, confirmations,
// and charts drawn with uPlot from JSON the server rendered into the page.
(function () {
  "use strict";
  function csrf() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (window.htmx) {
      // 304: nothing changed, keep what is shown; 422 and other 4xx: show the answer's HTML.
      htmx.config.responseHandling = [
        { code: "204", swap: false },
        { code: "304", swap: false },
        { code: "[23]..", swap: true },
        { code: "4..", swap: true, error: false },
        { code: "...", swap: false, error: true },
      ];
      document.body.addEventListener("htmx:configRequest", function (e) {
        e.detail.headers["X-CSRF-Token"] = csrf();
        var etag = e.detail.elt.dataset ? e.detail.elt.dataset.etag : null;
        if (etag && e.detail.verb === "get") e.detail.headers["If-None-Match"] = etag;
      });
      document.body.addEventListener("htmx:afterRequest", function (e) {
        var etag = e.detail.xhr && e.detail.xhr.getResponseHeader("ETag");
        if (etag && e.detail.elt.dataset) e.detail.elt.dataset.etag = etag;
      });
      document.body.addEventListener("htmx:afterSwap", function (e) { drawCharts(e.target); });
    }
    document.addEventListener("submit", function (e) {
      var button = e.submitter || e.target.querySelector("[data-confirm]");
      var question = button && button.dataset ? button.dataset.confirm : null;
      if (question && !window.confirm(question)) e.preventDefault();
    });
    drawCharts(document);
    followProfile();
  });

  // The submit form: choosing a hardware profile shows its GPU range on the GPUs field.
  function followProfile() {
    var ranges = document.getElementById("profile-ranges");
    var select = document.getElementById("f-profile");
    var gpus = document.getElementById("f-gpus");
    if (!ranges || !select || !gpus) return;
    var table = JSON.parse(ranges.textContent);
    select.addEventListener("change", function () {
      var r = table[select.value];
      var help = gpus.parentElement.querySelector(".help");
      if (r) { gpus.min = r.min; gpus.max = r.max; if (help) help.textContent = r.help; }
      else { gpus.removeAttribute("min"); gpus.removeAttribute("max"); }
    });
  }

  // <div class="chart" data-chart='{"title": "...", "x": [unix seconds...],
  //   "series": [{"label": "...", "values": [...], "color": "#..."}], "y": "GPUs"}'>
  function drawCharts(root) {
    if (!window.uPlot) return;
    root.querySelectorAll("div.chart[data-chart]").forEach(function (el) {
      if (el.dataset.drawn) return;
      var spec = JSON.parse(el.dataset.chart);
      var palette = ["#1f5fbf", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490"];
      var series = [{}].concat(spec.series.map(function (s, i) {
        return { label: s.label, stroke: s.color || palette[i % palette.length], width: 2,
                 fill: s.fill || undefined };
      }));
      var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
      var width = Math.max(300, Math.min(el.clientWidth || 800, 1000));
      new uPlot({ title: spec.title, width: width, height: spec.height || 240, series: series,
                  axes: [{}, { label: spec.y || "" }] }, data, el);
      el.dataset.drawn = "1";
    });
  }
  window.gpuaasDrawCharts = drawCharts;
})();
