/* tapegrad report: the page's own script (no framework, nothing fetched).
 *
 * Each section.tg-section carries its numbers in a JSON script element
 * (script.tg-data). Heatmaps and
 * line charts are drawn by gnuplot's canvas functions (window.tgfigN, with
 * their images as data: URLs); this script calls each once, keeps the plot
 * area gnuplot reports (gnuplot.plot_xmin... as gnuplot_mouse.js reads
 * them) and maps the mouse to a cell or point with it, showing the value
 * from the JSON, never from the picture. The lesson's two figures
 * (averaging, attention) are drawn here. window.tgReport is the page's
 * interface for tests: ready, cellCenter, pointCenter, cellText,
 * weights, gainCurve. */
(function () {
  "use strict";

  var figs = {}; /* section id -> figure */
  var api = { ready: false };
  window.tgReport = api;

  /* A JSON number, or "nan" / "inf" / "-inf". */
  function num(v) {
    if (typeof v !== "string") return v;
    return v === "nan" ? NaN : v === "inf" ? Infinity : -Infinity;
  }
  /* The stored value as text: JSON carries the shortest round-trip digits,
   * which String() gives back; non-finite ones as their names. */
  function show(v) { return typeof v === "string" ? v : String(v); }
  function p6(x) { return x.toPrecision(6); }
  /* x to d decimals as the lesson prints np.round(x, d): x * 10^d rounded
   * half to even (0.125 -> "0.12", where toFixed gives "0.13") */
  function npFixed(x, d) {
    var f = Math.pow(10, d), y = x * f, r = Math.round(y);
    if (Math.abs(y - Math.trunc(y)) === 0.5) r = 2 * Math.round(y / 2);
    return (r / f).toFixed(d);
  }
  function label(labels, i) {
    return labels && labels[i] !== undefined && labels[i] !== "" ?
      " (" + labels[i] + ")" : "";
  }

  /* viridis, from dark to light, as gnuplot's palette in the heatmaps */
  var VIR = [[68, 1, 84], [59, 82, 139], [33, 144, 141], [93, 201, 99],
             [253, 231, 37]];
  function viridis(t) {
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    var x = t * (VIR.length - 1), i = Math.min(Math.floor(x), VIR.length - 2);
    var f = x - i, a = VIR[i], b = VIR[i + 1];
    return "rgb(" + Math.round(a[0] + f * (b[0] - a[0])) + "," +
      Math.round(a[1] + f * (b[1] - a[1])) + "," +
      Math.round(a[2] + f * (b[2] - a[2])) + ")";
  }

  /* Canvas pixels of a mouse event, whatever CSS does to the canvas. */
  function canvasXY(canvas, e) {
    var r = canvas.getBoundingClientRect();
    return { x: (e.clientX - r.left) * canvas.width / r.width,
             y: (e.clientY - r.top) * canvas.height / r.height };
  }
  /* Viewport CSS pixels of a canvas point, after scrolling it into view. */
  function toViewport(fig, x, y) {
    fig.section.scrollIntoView({ block: "center", inline: "nearest" });
    var r = fig.canvas.getBoundingClientRect();
    return { x: r.left + x * r.width / fig.canvas.width,
             y: r.top + y * r.height / fig.canvas.height };
  }

  /* ---- gnuplot's figures: the plot area as gnuplot_mouse.js reads it --- */
  function gnuplotArea() {
    var g = window.gnuplot;
    return { xmin: g.plot_xmin, xmax: g.plot_xmax, ybot: g.plot_ybot,
             ytop: g.plot_ytop, axmin: g.plot_axis_xmin,
             axmax: g.plot_axis_xmax, aymin: g.plot_axis_ymin,
             aymax: g.plot_axis_ymax, logx: g.plot_logaxis_x,
             logy: g.plot_logaxis_y };
  }
  function axisX(a, px) {
    var f = (px - a.xmin) / (a.xmax - a.xmin);
    if (a.logx > 0)
      return Math.exp(Math.log(a.axmin) + f * (Math.log(a.axmax) - Math.log(a.axmin)));
    return a.axmin + f * (a.axmax - a.axmin);
  }
  function axisY(a, py) {
    var f = (a.ybot - py) / (a.ybot - a.ytop);
    if (a.logy > 0)
      return Math.exp(Math.log(a.aymin) + f * (Math.log(a.aymax) - Math.log(a.aymin)));
    return a.aymin + f * (a.aymax - a.aymin);
  }
  function pixelX(a, x) {
    var f = a.logx > 0 ? (Math.log(x) - Math.log(a.axmin)) /
      (Math.log(a.axmax) - Math.log(a.axmin)) : (x - a.axmin) / (a.axmax - a.axmin);
    return a.xmin + f * (a.xmax - a.xmin);
  }
  function pixelY(a, y) {
    var f = a.logy > 0 ? (Math.log(y) - Math.log(a.aymin)) /
      (Math.log(a.aymax) - Math.log(a.aymin)) : (y - a.aymin) / (a.aymax - a.aymin);
    return a.ybot - f * (a.ybot - a.ytop);
  }

  /* Draws a gnuplot figure once its images are decoded. */
  function drawGnuplot(fig) {
    var d = fig.data;
    if (!d.gp || typeof window[d.gp] !== "function" || !window.gnuplot)
      return Promise.resolve();
    fig.canvas = document.getElementById(d.gp);
    var waits = (d.img || []).map(function (name) {
      var im = window[name];
      if (!im || im.complete) return Promise.resolve();
      return new Promise(function (ok) {
        im.addEventListener("load", ok);
        im.addEventListener("error", ok);
      });
    });
    return Promise.all(waits).then(function () {
      /* a heatmap's cells are an image gnuplot scales up: keep them
       * sharp (cells, not a blur) */
      fig.canvas.getContext("2d").imageSmoothingEnabled = false;
      window[d.gp]();
      fig.area = gnuplotArea();
      fig.drawn = true;
    });
  }

  /* ---- heatmap ------------------------------------------------------- */
  function heatmapText(fig, row, col) {
    var d = fig.data, k = row * d.cols + col;
    var v = d.mask && d.mask[k] ? "masked" : show(d.v[k]);
    /* on the diverging scale an exact 0 is hatched: say so in words too */
    if (v !== "masked" && d.scale && d.scale.kind === "diverging" &&
        num(d.v[k]) === 0) v += " (exactly 0)";
    if (d.block) {
      var r0 = row * d.block.fr, c0 = col * d.block.fc;
      var r1 = Math.min(d.block.rows, r0 + d.block.fr) - 1;
      var c1 = Math.min(d.block.cols, c0 + d.block.fc) - 1;
      return "rows " + r0 + "-" + r1 + ", cols " + c0 + "-" + c1 +
        " (block mean): " + v;
    }
    return "row " + row + label(d.rl, row) + ", col " + col +
      label(d.cl, col) + ": " + v;
  }
  function setupHeatmap(fig) {
    var readout = fig.section.querySelector(".tg-readout");
    fig.cell = function (x, y) { /* data coordinates -> cell, or null */
      var col = Math.round(x), row = Math.round(y);
      if (row < 0 || col < 0 || row >= fig.data.rows || col >= fig.data.cols)
        return null;
      return { row: row, col: col };
    };
    fig.center = function (row, col) {
      return { x: pixelX(fig.area, col), y: pixelY(fig.area, row) };
    };
    return drawGnuplot(fig).then(function () {
      if (!fig.drawn) return;
      fig.canvas.addEventListener("mousemove", function (e) {
        var p = canvasXY(fig.canvas, e), a = fig.area;
        var c = p.x >= a.xmin && p.x <= a.xmax && p.y >= a.ytop &&
          p.y <= a.ybot ? fig.cell(axisX(a, p.x), axisY(a, p.y)) : null;
        readout.textContent = c ? heatmapText(fig, c.row, c.col) : "";
      });
      fig.canvas.addEventListener("mouseleave", function () {
        readout.textContent = "";
      });
    });
  }

  /* ---- lines --------------------------------------------------------- */
  function setupLines(fig) {
    var readout = fig.section.querySelector(".tg-readout");
    var S = fig.data.series;
    fig.point = function (s, i) {
      return { x: pixelX(fig.area, num(S[s].x[i])),
               y: pixelY(fig.area, num(S[s].y[i])) };
    };
    return drawGnuplot(fig).then(function () {
      if (!fig.drawn) return;
      fig.canvas.addEventListener("mousemove", function (e) {
        var p = canvasXY(fig.canvas, e), best = null, bd = Infinity;
        for (var s = 0; s < S.length; s++)
          for (var i = 0; i < S[s].y.length; i++) {
            var q = fig.point(s, i);
            var dd = (q.x - p.x) * (q.x - p.x) + (q.y - p.y) * (q.y - p.y);
            if (dd < bd) { bd = dd; best = [s, i]; }
          }
        readout.textContent = best && bd < 400 * 400 ?
          (S[best[0]].label ? S[best[0]].label + " " : "") + "x = " +
          show(S[best[0]].x[best[1]]) + ": y = " + show(S[best[0]].y[best[1]]) : "";
      });
      fig.canvas.addEventListener("mouseleave", function () {
        readout.textContent = "";
      });
    });
  }

  /* ---- the lesson's figures: a T x T grid drawn here ------------------ */
  var LEFT = 90, TOP = 16, BOTTOM = 90, RIGHT = 16;
  function gridLayout(fig) {
    var T = fig.data.rows, c = fig.canvas;
    var cs = Math.min((c.width - LEFT - RIGHT) / T, (c.height - TOP - BOTTOM) / T);
    return { cs: cs, x0: LEFT, y0: TOP };
  }
  function tokenOf(d, i) {
    return d.tok && d.tok[i] !== undefined ? d.tok[i] : String(i);
  }
  /* values: rows of numbers (null: masked); sel: outlined row or -1 */
  function drawGrid(fig, values, sel) {
    var c = fig.canvas, ctx2 = c.getContext("2d"), d = fig.data;
    var L = gridLayout(fig), T = d.rows, cs = L.cs;
    ctx2.clearRect(0, 0, c.width, c.height);
    ctx2.font = "12px sans-serif";
    fig.shown = []; /* each cell's text, row-major: what the page says */
    for (var i = 0; i < T; i++)
      for (var j = 0; j < T; j++) {
        var v = values[i][j];
        fig.shown.push(v === null ? "masked" : isNaN(v) ? "nan" : npFixed(v, 2));
        ctx2.fillStyle = v === null ? "#aaaaaa" :
          isNaN(v) ? "#ff00ff" : viridis(v);
        ctx2.fillRect(L.x0 + j * cs, L.y0 + i * cs, cs, cs);
        if (cs >= 30 && v !== null && isFinite(v)) {
          ctx2.fillStyle = v > 0.6 ? "#000" : "#fff";
          ctx2.textAlign = "center";
          ctx2.textBaseline = "middle";
          ctx2.fillText(npFixed(v, 2), L.x0 + (j + 0.5) * cs, L.y0 + (i + 0.5) * cs);
        }
      }
    ctx2.fillStyle = "#222";
    for (var k = 0; k < T && cs >= 8; k++) {
      ctx2.textAlign = "right";
      ctx2.textBaseline = "middle";
      ctx2.fillText(tokenOf(d, k), L.x0 - 6, L.y0 + (k + 0.5) * cs);
      ctx2.save();
      ctx2.translate(L.x0 + (k + 0.5) * cs, L.y0 + T * cs + 6);
      ctx2.rotate(-Math.PI / 4);
      ctx2.fillText(tokenOf(d, k), 0, 0);
      ctx2.restore();
    }
    if (sel >= 0) {
      ctx2.strokeStyle = "#e4572e";
      ctx2.lineWidth = 3;
      ctx2.strokeRect(L.x0 + 1.5, L.y0 + sel * cs + 1.5, T * cs - 3, cs - 3);
    }
  }
  function gridCell(fig, e) {
    var p = canvasXY(fig.canvas, e), L = gridLayout(fig);
    var col = Math.floor((p.x - L.x0) / L.cs), row = Math.floor((p.y - L.y0) / L.cs);
    if (row < 0 || col < 0 || row >= fig.data.rows || col >= fig.data.cols)
      return null;
    return { row: row, col: col };
  }
  function gridSetup(fig) {
    fig.canvas = document.getElementById(fig.data.canvas);
    fig.center = function (row, col) {
      var L = gridLayout(fig);
      return { x: L.x0 + (col + 0.5) * L.cs, y: L.y0 + (row + 0.5) * L.cs };
    };
  }
  function rows(d, f) {
    var out = [];
    for (var i = 0; i < d.rows; i++) {
      var r = [];
      for (var j = 0; j < d.cols; j++) r.push(f(i * d.cols + j));
      out.push(r);
    }
    return out;
  }

  function setupAveraging(fig) {
    var d = fig.data, readout = fig.section.querySelector(".tg-readout");
    gridSetup(fig);
    /* the future (above the diagonal, weight 0) is masked, not "0.00" */
    var vals = rows(d, function (k) {
      var w = num(d.v[k]);
      return k % d.cols > Math.floor(k / d.cols) && w === 0 ? null : w;
    });
    var sel = -1;
    drawGrid(fig, vals, sel);
    fig.canvas.addEventListener("click", function (e) {
      var c = gridCell(fig, e);
      if (!c) return;
      sel = c.row;
      drawGrid(fig, vals, sel);
      var toks = [], ws = [];
      for (var j = 0; j < d.cols; j++) {
        var w = d.v[sel * d.cols + j];
        if (num(w) !== 0) { toks.push(tokenOf(d, j)); ws.push(show(w)); }
      }
      var same = ws.every(function (w) { return w === ws[0]; });
      readout.textContent = "row " + sel + label(d.tok, sel) + " averages: " +
        (same ? toks.join(", ") + " (each " + ws[0] + ")" :
         toks.map(function (t, i) { return t + " (" + ws[i] + ")"; }).join(", "));
    });
    fig.drawn = true;
    return Promise.resolve();
  }

  /* softmax over each row of scores / temperature (or over row only),
   * masked entries excluded (as -inf), the row's max subtracted first: in
   * double. */
  function attentionWeights(d, temp, only) {
    var out = [];
    for (var i = only === undefined ? 0 : only;
         i < (only === undefined ? d.rows : only + 1); i++) {
      var m = -Infinity, row = [], j, k;
      for (j = 0; j < d.cols; j++) {
        k = i * d.cols + j;
        if (!(d.mask && d.mask[k])) m = Math.max(m, num(d.v[k]) / temp);
      }
      var sum = 0;
      for (j = 0; j < d.cols; j++) {
        k = i * d.cols + j;
        if (d.mask && d.mask[k]) { row.push(null); continue; }
        var e = Math.exp(num(d.v[k]) / temp - m);
        row.push(e);
        sum += e;
      }
      for (j = 0; j < d.cols; j++) if (row[j] !== null) row[j] /= sum;
      out.push(row);
    }
    return out;
  }
  /* The row's entropy -sum p log p, and with the gradient g reaching its
   * weights (dL/dattn) its softmax gain ||dL/dscores|| / ||dL/dattn|| =
   * ||J g|| / ||g||, J = diag(p) - p p^T over the unmasked entries:
   * (J g)_i = p_i (g_i - sum_j p_j g_j). NaN when no gradient reaches it. */
  function rowGain(p, g) {
    var pg = 0, n2 = 0, j2 = 0, i;
    for (i = 0; i < p.length; i++) if (p[i] !== null) pg += p[i] * num(g[i]);
    for (i = 0; i < p.length; i++) {
      if (p[i] === null) continue;
      var gi = num(g[i]), ji = p[i] * (gi - pg);
      n2 += gi * gi;
      j2 += ji * ji;
    }
    return n2 > 0 ? Math.sqrt(j2 / n2) : NaN;
  }
  function rowStats(p, g) {
    var h = 0;
    for (var i = 0; i < p.length; i++) if (p[i] > 0) h -= p[i] * Math.log(p[i]);
    var text = "entropy " + p6(h) + " nats";
    if (!g) return text;
    var gain = rowGain(p, g);
    return text + ", gain " + (isNaN(gain) ? "none (no gradient reaches this row)" : p6(gain));
  }
  /* The row's gain against the temperature, log-spaced over the slider's
   * range, drawn on the figure's second canvas with the slider's marked. */
  function gainCurve(fig, row) {
    var d = fig.data, lo = Math.log(fig.tmin), hi = Math.log(fig.tmax), out = [];
    var g = d.g.slice(row * d.cols, (row + 1) * d.cols);
    for (var k = 0; k <= 160; k++) {
      var t = Math.exp(lo + (hi - lo) * k / 160);
      out.push([t, rowGain(attentionWeights(d, t, row)[0], g)]);
    }
    return out;
  }
  function drawGainCurve(fig, row) {
    var c = fig.curveCanvas, ctx = c.getContext("2d"), W = c.width, H = c.height;
    var L = 56, R = 14, T = 24, B = 40;
    ctx.clearRect(0, 0, W, H);
    ctx.fillStyle = "#222";
    ctx.font = "12px sans-serif";
    if (row === null) {
      ctx.fillText("hover a row: its softmax gain against the temperature", L, H / 2);
      return;
    }
    var pts = gainCurve(fig, row), ymax = 0;
    pts.forEach(function (q) { if (q[1] > ymax) ymax = q[1]; });
    if (!(ymax > 0)) ymax = 1;
    var lo = Math.log(fig.tmin), hi = Math.log(fig.tmax);
    function X(t) { return L + (Math.log(t) - lo) / (hi - lo) * (W - L - R); }
    function Y(v) { return H - B - v / (ymax * 1.1) * (H - T - B); }
    ctx.strokeStyle = "#888";
    ctx.strokeRect(L, T, W - L - R, H - T - B);
    ctx.fillText("row " + row + label(fig.data.tok, row) +
                 ": softmax gain ||dL/dscores|| / ||dL/dattn|| against the temperature", L, 15);
    ctx.fillText("temperature (log scale)", W / 2 - 60, H - 6);
    ctx.fillText(p6(fig.tmin).replace(/\.?0+$/, ""), L - 10, H - B + 14);
    ctx.fillText(p6(fig.tmax).replace(/\.?0+$/, ""), W - R - 40, H - B + 14);
    ctx.fillText("0", L - 14, H - B + 4);
    ctx.fillText((ymax * 1.1).toPrecision(2), 4, T + 10);
    ctx.fillText("gain", 4, T + 28);
    ctx.strokeStyle = "#1f5fbf";
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach(function (q, k) {
      var v = isNaN(q[1]) ? 0 : q[1];
      if (k) ctx.lineTo(X(q[0]), Y(v)); else ctx.moveTo(X(q[0]), Y(v));
    });
    ctx.stroke();
    var g = rowGain(fig.w[row], fig.data.g.slice(row * fig.data.cols, (row + 1) * fig.data.cols));
    var x = X(fig.temp);
    ctx.strokeStyle = "#d62728";
    ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, H - B); ctx.stroke();
    ctx.fillStyle = "#d62728";
    ctx.beginPath(); ctx.arc(x, Y(isNaN(g) ? 0 : g), 4, 0, 2 * Math.PI); ctx.fill();
    ctx.fillText("temperature " + p6(fig.temp) + ": gain " + (isNaN(g) ? "none" : p6(g)),
                 Math.min(x + 6, W - R - 190), T + 14);
    fig.curve = { row: row, temp: fig.temp, gain: g, points: pts };
  }
  /* The attention figure's key: axis titles and a colour bar of the
   * weights on their fixed range [0, 1] (the cells' viridis(w), never
   * stretched to the data), so two figures compare colour for colour. */
  function attentionKey(fig) {
    var c = fig.canvas, g = c.getContext("2d"), L = gridLayout(fig);
    var side = fig.data.rows * L.cs, x = L.x0 + side + 14, h = side;
    for (var i = 0; i < h; i++) {
      g.fillStyle = viridis(1 - i / (h - 1));
      g.fillRect(x, L.y0 + i, 12, 1);
    }
    g.fillStyle = "#222";
    g.font = "11px sans-serif";
    g.textAlign = "left";
    g.textBaseline = "middle";
    [0, 0.5, 1].forEach(function (w) {
      g.fillText(String(w), x + 16, L.y0 + (1 - w) * (h - 1));
    });
    g.font = "12px sans-serif";
    g.textAlign = "center";
    g.save();
    g.translate(x + 42, L.y0 + h / 2);
    g.rotate(Math.PI / 2);
    g.fillText("weight (fixed 0 to 1)", 0, 0);
    g.restore();
    g.fillText("key (the token attended to)", L.x0 + side / 2, c.height - 10);
    g.save();
    g.translate(12, L.y0 + side / 2);
    g.rotate(-Math.PI / 2);
    g.fillText("query (the row)", 0, 0);
    g.restore();
  }
  function setupAttention(fig) {
    var d = fig.data, sec = fig.section;
    var readout = sec.querySelector(".tg-readout");
    var stats = sec.querySelector(".tg-rowstats");
    var slider = sec.querySelector(".tg-temperature");
    var shown = sec.querySelector(".tg-temperature-value");
    gridSetup(fig);
    fig.temp = num(d.temp);
    fig.tmin = Number(slider.min);
    fig.tmax = Number(slider.max);
    fig.w = attentionWeights(d, fig.temp);
    fig.curveCanvas = d.g ? sec.querySelector(".tg-gaincurve") : null;
    var hover = null, curveRow = null;
    function say() {
      if (hover) curveRow = hover.row; /* the curve stays on the last row */
      if (fig.curveCanvas) drawGainCurve(fig, curveRow);
      if (!hover) { readout.textContent = ""; stats.textContent = ""; return; }
      var v = fig.w[hover.row][hover.col];
      readout.textContent = "row " + hover.row + label(d.tok, hover.row) +
        ", col " + hover.col + label(d.tok, hover.col) + ": " +
        (v === null ? "masked" : isNaN(v) ? "nan" : p6(v));
      stats.textContent = rowStats(fig.w[hover.row],
        d.g ? d.g.slice(hover.row * d.cols, (hover.row + 1) * d.cols) : null);
    }
    say();
    drawGrid(fig, fig.w, -1);
    attentionKey(fig);
    fig.canvas.addEventListener("mousemove", function (e) {
      hover = gridCell(fig, e);
      say();
    });
    fig.canvas.addEventListener("mouseleave", function () {
      hover = null;
      say();
    });
    slider.addEventListener("input", function () {
      var t = parseFloat(slider.value);
      if (!(t > 0)) return;
      fig.temp = t;
      shown.textContent = String(t);
      fig.w = attentionWeights(d, t);
      drawGrid(fig, fig.w, -1);
      attentionKey(fig);
      say();
    });
    fig.drawn = true;
    return Promise.resolve();
  }

  /* ---- the interface ------------------------------------------------- */
  function fig(id) {
    var f = figs[id];
    if (!f) throw new Error("tgReport: no figure " + id);
    return f;
  }
  api.cellCenter = function (id, row, col) {
    var f = fig(id);
    if (!f.center || !f.drawn) throw new Error("tgReport: " + id + " has no cells drawn");
    var p = f.center(row, col);
    return toViewport(f, p.x, p.y);
  };
  api.pointCenter = function (id, series, i) {
    var f = fig(id);
    if (!f.point || !f.drawn) throw new Error("tgReport: " + id + " has no points drawn");
    var p = f.point(series, i);
    return toViewport(f, p.x, p.y);
  };
  api.cellText = function (id, row, col) {
    var f = fig(id);
    if (!f.shown) throw new Error("tgReport: " + id + " is not a lesson figure");
    return f.shown[row * f.data.cols + col];
  };
  /* The gain curve last drawn: its row, the temperature, the gain there,
   * the points [temperature, gain]. */
  api.gainCurve = function (id) {
    var f = fig(id);
    if (!f.curveCanvas) throw new Error("tgReport: " + id + " has no gain curve");
    return f.curve || null;
  };
  api.weights = function (id) {
    var f = fig(id);
    if (!f.w) throw new Error("tgReport: " + id + " is not an attention figure");
    return f.w.map(function (r) { return r.slice(); });
  };

  var setups = { heatmap: setupHeatmap, lines: setupLines,
                 averaging: setupAveraging, attention: setupAttention };
  var waits = [];
  var sections = document.querySelectorAll("section.tg-section");
  for (var i = 0; i < sections.length; i++) {
    var sec = sections[i], kind = sec.getAttribute("data-kind");
    var el = sec.querySelector("script.tg-data");
    if (!el || !setups[kind]) continue;
    var f = { section: sec, kind: kind, data: JSON.parse(el.textContent) };
    figs[sec.id] = f;
    waits.push(setups[kind](f));
  }
  Promise.all(waits).then(function () { api.ready = true; },
                          function (e) { api.ready = true; throw e; });
})();
