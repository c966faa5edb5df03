// The fleet heatmap: one SVG drawn from the compact JSON the page carries
// (gpuaas.service.fleet_view.fleet_picture): groups (rack x NVLink domain) of nodes, each node
// a row of GPU cells, each cell its parts (milli-GPU) stacked and coloured by owner. Then the
// page polls /fleet/picture.json with the ETag and redraws only when it changed.
(function () {
  "use strict";
  var CELL = 9, GAP = 1, PER_COLUMN = 8, LABEL = 14, PAD = 8, MAX_GPUS = 8;
  var SVG = "http://www.w3.org/2000/svg";

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (ch) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[ch];
    });
  }

  function draw(host, data) {
    var width = Math.max(host.clientWidth || 960, 320);
    var nodeWidth = MAX_GPUS * (CELL + GAP);
    var x = 0, y = 0, rowHeight = 0, out = [], nodes = [];
    data.groups.forEach(function (g) {
      var columns = Math.ceil(g.nodes.length / PER_COLUMN);
      var name = (g.rack || "no rack") + (g.nvlink ? " · " + g.nvlink : "");
      // wide enough for its label (10px text: about 5.6px a character)
      var gw = Math.max(columns * (nodeWidth + PAD) + PAD, Math.ceil(name.length * 5.6) + 2 * PAD);
      var gh = LABEL + Math.min(g.nodes.length, PER_COLUMN) * (CELL + GAP) + PAD;
      if (x > 0 && x + gw > width) { x = 0; y += rowHeight + PAD; rowHeight = 0; }
      out.push('<g class="group"><rect class="box" x="' + x + '" y="' + y + '" width="' + gw +
               '" height="' + gh + '"/><text x="' + (x + PAD) + '" y="' + (y + 11) + '">' +
               esc(name) + "</text>");
      g.nodes.forEach(function (n, k) {
        var nx = x + PAD + Math.floor(k / PER_COLUMN) * (nodeWidth + PAD);
        var ny = y + LABEL + (k % PER_COLUMN) * (CELL + GAP);
        var i = nodes.length;
        nodes.push(n);
        n[3].forEach(function (parts, slot) {
          var cx = nx + slot * (CELL + GAP), top = ny;
          parts.forEach(function (p) {
            var h = CELL * p[1] / 1000;
            if (h <= 0) return;
            out.push('<rect x="' + cx + '" y="' + top.toFixed(2) + '" width="' + CELL +
                     '" height="' + h.toFixed(2) + '" fill="' + data.legend[p[0]].colour +
                     '" data-n="' + i + '" data-g="' + slot + '"/>');
            top += h;
          });
        });
      });
      out.push("</g>");
      x += gw + PAD;
      rowHeight = Math.max(rowHeight, gh);
    });
    var height = y + rowHeight + PAD;
    host.innerHTML = '<svg xmlns="' + SVG + '" class="heatmap-svg" width="' + width +
      '" height="' + height + '" role="img" aria-label="' + esc(data.nodes + " nodes, " +
      data.gpus + " GPUs, coloured by owner; the legend gives the colours") + '">' +
      out.join("") + "</svg>";
    host.dataset.cells = String(host.querySelectorAll("rect[data-n]").length);
    host.dataset.etag = data.etag;
    host._nodes = nodes;
  }

  function legend(list, data) {
    if (!list) return;
    list.innerHTML = data.legend.map(function (e) {
      return '<li data-key="' + esc(e.key) + '" data-colour="' + esc(e.colour) +
        '"><span class="swatch" style="background:' + esc(e.colour) + '"></span>' +
        esc(e.label) + ' <span class="n">' + e.gpus.toLocaleString("en") + " GPUs</span></li>";
    }).join("");
  }

  function tooltip(host, tip, data) {
    host.addEventListener("mousemove", function (ev) {
      var t = ev.target;
      if (!t.dataset || t.dataset.n === undefined) { tip.hidden = true; return; }
      var n = host._nodes[+t.dataset.n], slot = +t.dataset.g;
      var parts = n[3][slot].map(function (p) {
        return esc(host._legend[p[0]].label) + " " + (p[1] / 1000).toFixed(3).replace(/\.?0+$/, "");
      }).join(", ");
      tip.innerHTML = "<b>" + esc(n[0]) + "</b> GPU " + slot + " (" + esc(n[1]) + ", " +
        esc(n[2]) + ")<br>" + parts;
      tip.style.left = (ev.offsetX + 14) + "px";
      tip.style.top = (ev.offsetY + 14) + "px";
      tip.hidden = false;
    });
    host.addEventListener("mouseleave", function () { tip.hidden = true; });
  }

  function start() {
    var host = document.getElementById("heatmap");
    var source = document.getElementById("fleet-data");
    if (!host || !source) return;
    var data = JSON.parse(source.textContent);
    var t0 = performance.now();
    draw(host, data);
    host._legend = data.legend;
    host.dataset.drawMs = String(Math.round(performance.now() - t0));
    var tip = document.getElementById("heatmap-tip");
    if (tip) tooltip(host, tip, data);
    var every = +(host.dataset.poll || 0);
    if (!every) return;
    setInterval(function () {
      if (document.visibilityState !== "visible") return;
      fetch("/fleet/picture.json", { headers: { "If-None-Match": '"' + host.dataset.etag + '"' },
                                     credentials: "same-origin" })
        .then(function (r) { return r.status === 200 ? r.json() : null; })
        .then(function (next) {
          if (!next || next.etag === host.dataset.etag) return;
          draw(host, next);
          host._legend = next.legend;
          legend(document.getElementById("legend"), next);
        })
        .catch(function () {});
    }, every);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
