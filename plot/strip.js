/* tapegrad report: the lesson's forward strip (plot/report_strip.c writes
 * its section; nothing fetched, no framework).
 *
 * The section's JSON carries the head's scores = q @ k^T (T x T, computed
 * by the library in double), v (T x dv), hs, the followed row and the
 * tokens. Everything after the scores is computed here, as the lesson's
 * numpy code computes it, and again whenever the sqrt(hs) switch or the
 * temperature t moves:
 *
 *   wei     = tril / tril.sum(1)          row i: 1/(i+1) on cols 0..i
 *   scaled  = scores / sqrt(hs)           (the switch off: scores)
 *   masked  = scaled, cols j > i masked   (-inf: weight exactly 0)
 *   weights = softmax(masked / t)         row max subtracted, as numpy's
 *   out     = weights @ v
 *
 * Numbers are shown as the lesson prints them: np.round(x, d), i.e. x *
 * 10^d rounded half to even and scaled back (0.125 -> 0.12, where
 * toFixed says 0.13), d = 3 for the weights (the lesson's np.round(w, 3))
 * and 2 elsewhere. Masked cells are drawn hatched grey, never as a number.
 * window.tgStrip is the interface for tests: ready, and per section id
 * stage(), cellText(), value(), cellBox(), weights(), bars(), row(),
 * rowLine(), visited. */
(function () {
  "use strict";

  var api = { ready: false, figs: {} };
  window.tgStrip = api;

  /* The stages: heading, the lesson's line, decimals shown, colour scale,
   * axis titles. */
  var STAGES = [
    { name: "averaging", code: "wei = tril / tril.sum(1, keepdims=True)",
      dec: 2, unit: true, x: "past token j", y: "current token t" },
    { name: "scores", code: "scores = q @ k.T", dec: 2, unit: false,
      x: "key token j", y: "query token t" },
    { name: "scaled", code: "scaled = scores / sqrt(hs)", dec: 2,
      unit: false, x: "key token j", y: "query token t" },
    { name: "masked", code: "masked = where(tril == 0, -inf, scaled)",
      dec: 2, unit: false, x: "key token j", y: "query token t" },
    { name: "softmax", code: "weights = softmax(masked / t)", dec: 3,
      unit: true, x: "key token j", y: "query token t" },
    { name: "out", code: "out = weights @ v", dec: 2, unit: false,
      x: "value feature", y: "token t" }
  ];
  var PLAY_MS = 900;

  var CSS =
    ".tg-strip{display:flex;flex-wrap:wrap;gap:10px}" +
    ".tg-strip-panel{margin:0;padding:4px;border:2px solid transparent;" +
    "border-radius:6px;max-width:100%;transition:opacity .3s}" +
    ".tg-strip-panel.tg-strip-now{border-color:#e4572e}" +
    ".tg-strip-panel.tg-strip-ahead{opacity:.3}" +
    ".tg-strip-panel canvas,canvas.tg-strip-bars{max-width:100%;height:auto}" +
    ".tg-strip-panel figcaption{font-size:.85em;min-height:2.6em}" +
    ".tg-strip-panel figcaption code{display:block;color:#555}" +
    ".tg-strip-controls{margin:.4em 0}" +
    ".tg-strip-row{font-family:monospace;margin:.3em 0;overflow-x:auto}" +
    ".tg-strip-panel figcaption{cursor:pointer}.tg-strip-where{font-weight:bold}";

  /* ---- numbers as the lesson prints them ----------------------------- */
  function num(v) {
    if (typeof v !== "string") return v;
    return v === "nan" ? NaN : v === "inf" ? Infinity : -Infinity;
  }
  /* np.round(x, d): rint(x * 10^d) / 10^d, ties to even */
  function npRound(x, d) {
    var f = Math.pow(10, d), y = x * f, r = Math.round(y);
    if (Math.abs(y - Math.trunc(y)) === 0.5) r = 2 * Math.round(y / 2);
    return r / f;
  }
  function fmt(x, d) {
    if (!isFinite(x)) return isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
    var r = npRound(x, d), s = Math.abs(r).toFixed(d);
    return (r < 0 || Object.is(r, -0) ? "-" : "") + s;
  }

  /* ---- the stages computed -------------------------------------------- */
  /* A matrix: rows, cols, v (row-major), mask (true: masked) or null. */
  function causal(T) {
    var m = [];
    for (var i = 0; i < T; i++)
      for (var j = 0; j < T; j++) m.push(j > i);
    return m;
  }
  function softmaxRows(x, mask, T, t) {
    var w = new Array(T * T);
    for (var i = 0; i < T; i++) {
      var m = -Infinity, sum = 0, j;
      for (j = 0; j <= i; j++) m = Math.max(m, x[i * T + j] / t);
      for (j = 0; j < T; j++) {
        w[i * T + j] = mask[i * T + j] ? 0 : Math.exp(x[i * T + j] / t - m);
        sum += w[i * T + j];
      }
      for (j = 0; j < T; j++) w[i * T + j] /= sum;
    }
    return w;
  }
  function matmul(a, b, n, k, m) { /* (n,k) @ (k,m) */
    var c = new Array(n * m);
    for (var i = 0; i < n; i++)
      for (var j = 0; j < m; j++) {
        var s = 0;
        for (var p = 0; p < k; p++) s += a[i * k + p] * b[p * m + j];
        c[i * m + j] = s;
      }
    return c;
  }
  function compute(f) {
    var d = f.data, T = d.T, mask = causal(T), wei = [];
    for (var i = 0; i < T; i++)
      for (var j = 0; j < T; j++) wei.push(j <= i ? 1 / (i + 1) : 0);
    var S = d.scores.map(num), root = f.sqrt ? Math.sqrt(d.hs) : 1;
    var scaled = S.map(function (s) { return s / root; });
    var w = softmaxRows(scaled, mask, T, f.temp);
    var grid = function (v, m) { return { rows: T, cols: T, v: v, mask: m }; };
    f.m = [grid(wei, mask), grid(S, null), grid(scaled, null),
           grid(scaled, mask), grid(w, mask),
           { rows: T, cols: d.dv, v: matmul(w, d.v.map(num), T, T, d.dv),
             mask: null }];
    /* one signed range for scores, scaled and masked: scaling shows as
     * paler colours; out its own */
    f.range = [1, 0, 0, 0, 1, 0];
    for (var k = 0; k < T * T; k++)
      if (isFinite(S[k])) f.range[1] = Math.max(f.range[1], Math.abs(S[k]));
    f.range[2] = f.range[3] = f.range[1];
    f.m[5].v.forEach(function (x) {
      if (isFinite(x)) f.range[5] = Math.max(f.range[5], Math.abs(x));
    });
  }

  /* ---- colours -------------------------------------------------------- */
  var VIR = [[68, 1, 84], [59, 82, 139], [33, 144, 141], [93, 201, 99],
             [253, 231, 37]];
  function mix(a, b, f) {
    return "rgb(" + [0, 1, 2].map(function (i) {
      return Math.round(a[i] + f * (b[i] - a[i]));
    }).join(",") + ")";
  }
  function viridis(t) { /* weights: fixed [0, 1] */
    t = Math.min(1, Math.max(0, t));
    var x = t * (VIR.length - 1), i = Math.min(Math.floor(x), VIR.length - 2);
    return mix(VIR[i], VIR[i + 1], x - i);
  }
  function diverging(t) { /* signed: [-1, 1], 0 white */
    t = Math.min(1, Math.max(-1, t));
    return t < 0 ? mix([255, 255, 255], [33, 102, 172], -t) :
      mix([255, 255, 255], [178, 24, 43], t);
  }
  function colour(st, x, range) {
    if (isNaN(x)) return "#ff00ff";
    return st.unit ? viridis(x) : diverging(range > 0 ? x / range : 0);
  }
  function ink(st, x, range) {
    return st.unit ? (x > 0.6 ? "#000" : "#fff") :
      Math.abs(x) > 0.6 * range ? "#fff" : "#000";
  }
  function hatch(ctx, x, y, w, h) {
    ctx.fillStyle = "#d4d4d4";
    ctx.fillRect(x, y, w, h);
    if (w < 6) return; /* a cell too small for lines: plain grey */
    ctx.save();
    ctx.beginPath();
    ctx.rect(x, y, w, h);
    ctx.clip();
    ctx.strokeStyle = "#8a8a8a";
    ctx.lineWidth = 1;
    for (var k = -h; k < w; k += 6) {
      ctx.moveTo(x + k, y + h);
      ctx.lineTo(x + k + h, y);
    }
    ctx.stroke();
    ctx.restore();
  }

  /* ---- a stage's grid --------------------------------------------------- */
  var L = 58, R = 10, TOP = 8, BOT = 84, W = 340, H = 380;
  function tok(d, i) {
    return d.tok && d.tok[i] !== undefined && d.tok[i] !== "" ? d.tok[i] :
      String(i);
  }
  /* a stage's cells: ch high; cw wide, the T x T stages square, out's
   * columns widened to the panel when they are few */
  function layout(f, s) {
    var T = f.data.T, m = f.m[s];
    var ch = Math.min((W - L - R) / T, (H - TOP - BOT) / T);
    var cw = s === 5 ? Math.max(ch, (W - L - R) / m.cols) : ch;
    return { cw: cw, ch: ch, w: m.cols * cw, h: m.rows * ch };
  }
  /* every how many-th tick is labelled: at least 22 pixels apart */
  function tickStep(size) {
    var step = 1;
    while (step * size < 22) step *= 2;
    return step;
  }
  function cellText(f, s, i, j) {
    var m = f.m[s], k = i * m.cols + j;
    return m.mask && m.mask[k] ? "masked" : fmt(m.v[k], STAGES[s].dec);
  }
  function drawCells(ctx, f, s, g) {
    var m = f.m[s], st = STAGES[s], r = f.range[s];
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (var i = 0; i < m.rows; i++)
      for (var j = 0; j < m.cols; j++) {
        /* whole pixels, so that small cells leave no seams */
        var k = i * m.cols + j, x = Math.floor(L + j * g.cw);
        var y = Math.floor(TOP + i * g.ch);
        var w = Math.floor(L + (j + 1) * g.cw) - x;
        var h = Math.floor(TOP + (i + 1) * g.ch) - y;
        if (m.mask && m.mask[k]) { hatch(ctx, x, y, w, h); continue; }
        ctx.fillStyle = colour(st, m.v[k], r);
        ctx.fillRect(x, y, w, h);
        if (g.ch < 16 || g.cw < 16) continue; /* too small for numbers */
        var text = cellText(f, s, i, j);
        ctx.font = "10px sans-serif";
        if (ctx.measureText(text).width > g.cw - 3) continue;
        ctx.fillStyle = ink(st, m.v[k], r);
        ctx.fillText(text, x + w / 2, y + h / 2);
      }
    if (f.row >= 0) {
      ctx.strokeStyle = "#e4572e";
      ctx.lineWidth = 2;
      ctx.strokeRect(L + 1, TOP + f.row * g.ch + 1, g.w - 2,
                     Math.max(g.ch - 2, 1));
    }
  }
  /* tick labels (every step-th), the axis titles, the colour bar */
  function drawAxes(ctx, f, s, g) {
    var m = f.m[s], st = STAGES[s], d = f.data;
    ctx.fillStyle = "#222";
    ctx.font = "11px sans-serif";
    var step = tickStep(g.ch), k;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (k = 0; k < m.rows; k += step)
      ctx.fillText(tok(d, k), L - 4, TOP + (k + 0.5) * g.ch, L - 22);
    step = tickStep(g.cw);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (k = 0; k < m.cols; k += step)
      ctx.fillText(s === 5 ? String(k) : tok(d, k), L + (k + 0.5) * g.cw,
                   TOP + g.h + 3, g.cw * step);
    var y0 = TOP + g.h;
    ctx.font = "12px sans-serif";
    ctx.fillText(st.x, L + g.w / 2, y0 + 20);
    ctx.save();
    ctx.translate(12, TOP + g.h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText(st.y, 0, 0);
    ctx.restore();
    colourBar(ctx, st, f.range[s], L, y0 + 42, 160, !!m.mask);
  }
  function colourBar(ctx, st, r, x, y, w, masked) {
    var lo = st.unit ? 0 : -r, hi = st.unit ? 1 : r;
    for (var p = 0; p < w; p++) {
      ctx.fillStyle = colour(st, lo + (hi - lo) * p / (w - 1), r);
      ctx.fillRect(x + p, y, 1, 9);
    }
    ctx.strokeStyle = "#999";
    ctx.lineWidth = 1;
    ctx.strokeRect(x - 0.5, y - 0.5, w + 1, 10);
    ctx.fillStyle = "#222";
    ctx.font = "10px sans-serif";
    ctx.textBaseline = "top";
    ctx.textAlign = "left";
    ctx.fillText(fmt(lo, 2), x, y + 12);
    ctx.textAlign = "right";
    ctx.fillText(fmt(hi, 2), x + w, y + 12);
    ctx.textAlign = "left";
    ctx.fillText(st.unit ? "weight" : "value", x + w + 6, y);
    if (!masked) return;
    ctx.fillStyle = "#555";
    ctx.fillText("hatched: masked", x + w + 6, y + 12);
  }
  function drawStage(f, s) {
    var c = f.canvas[s], g = layout(f, s);
    var width = Math.max(W, L + g.w + R);
    if (c.width !== width) c.width = width;
    var ctx = c.getContext("2d");
    ctx.clearRect(0, 0, c.width, c.height);
    drawCells(ctx, f, s, g);
    drawAxes(ctx, f, s, g);
    f.caption[s].innerHTML = "";
    var head = document.createElement("b"), code = document.createElement("code");
    head.textContent = (s + 1) + " \u00b7 " + STAGES[s].name +
      (s === 2 && !f.sqrt ? " (switched off: the scores as they are)" : "") +
      (s === 4 ? ", t = " + f.temp : "");
    code.textContent = s === 2 && !f.sqrt ? "scaled = scores" : STAGES[s].code;
    f.caption[s].appendChild(head);
    f.caption[s].appendChild(code);
  }

  /* ---- the bar chart of the followed row ------------------------------- */
  function bars(f) {
    var T = f.data.T, w = f.m[4], out = [];
    for (var j = 0; j < T; j++) {
      var masked = w.mask[f.row * T + j], v = w.v[f.row * T + j];
      out.push({ value: v, masked: masked, text: masked ? "masked" : fmt(v, 3) });
    }
    return out;
  }
  function drawBars(f) {
    var c = f.bars, ctx = c.getContext("2d"), T = f.data.T, b = bars(f);
    var l = 64, r = 16, top = 34, bot = 64, pw = c.width - l - r;
    var ph = c.height - top - bot, bw = pw / T, k;
    ctx.clearRect(0, 0, c.width, c.height);
    ctx.strokeStyle = "#e4e4e4";
    ctx.fillStyle = "#222";
    ctx.font = "11px sans-serif";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (k = 0; k <= 4; k++) {
      var y = top + ph - ph * k / 4;
      ctx.beginPath();
      ctx.moveTo(l, y);
      ctx.lineTo(l + pw, y);
      ctx.stroke();
      ctx.fillText(fmt(k / 4, 2), l - 4, y);
    }
    ctx.textAlign = "center";
    for (k = 0; k < T; k++) {
      var x = l + k * bw + bw * 0.15, h = ph * Math.min(1, b[k].value);
      if (b[k].masked) hatch(ctx, x, top + ph - 8, bw * 0.7, 8);
      else {
        ctx.fillStyle = "#5b5bd6";
        ctx.fillRect(x, top + ph - h, bw * 0.7, h);
      }
      ctx.fillStyle = "#222";
      ctx.textBaseline = "bottom";
      if (bw >= 30) ctx.fillText(b[k].text, x + bw * 0.35, top + ph - (b[k].masked ? 8 : h) - 2);
      ctx.textBaseline = "top";
      if (k % tickStep(bw) === 0)
        ctx.fillText(tok(f.data, k), x + bw * 0.35, top + ph + 4,
                     bw * tickStep(bw));
    }
    barTitles(ctx, f, l, top, pw, ph);
  }
  function barTitles(ctx, f, l, top, pw, ph) {
    ctx.fillStyle = "#222";
    ctx.font = "bold 13px sans-serif";
    ctx.textBaseline = "top";
    ctx.fillText("how token " + tok(f.data, f.row) +
                 " splits its attention over the past", l + pw / 2, 6);
    ctx.font = "12px sans-serif";
    ctx.fillText("token j  (grey hatched = future, masked out)", l + pw / 2,
                 top + ph + 24);
    ctx.save();
    ctx.translate(14, top + ph / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText("attention weight", 0, 0);
    ctx.restore();
  }

  /* The followed row of the current stage, as the lesson prints a row
   * (np.round), masked entries named; the weights with their sum. */
  function rowLine(f) {
    var s = f.stage, m = f.m[s], cells = [], sum = 0;
    for (var j = 0; j < m.cols; j++) {
      cells.push(cellText(f, s, f.row, j));
      sum += m.v[f.row * m.cols + j];
    }
    return STAGES[s].name + ", row " + f.row + " (" + tok(f.data, f.row) +
      "): [" + cells.join("  ") + "]" +
      (s === 0 || s === 4 ? "  sum = " + fmt(sum, 3) : "");
  }

  /* ---- the strip: stages shown, controls --------------------------------- */
  /* where the strip stands: the current stage outlined, those after it
   * dimmed, the followed row's line */
  function mark(f) {
    for (var s = 0; s < 6; s++) {
      f.panel[s].classList.toggle("tg-strip-now", s === f.stage);
      f.panel[s].classList.toggle("tg-strip-ahead", s > f.stage);
    }
    f.rowText.textContent = rowLine(f);
    f.where.textContent = "stage " + (f.stage + 1) + " of 6: " +
      STAGES[f.stage].name;
    if (f.visited.indexOf(f.stage) < 0) f.visited.push(f.stage);
  }
  /* everything recomputed and drawn: the switch, the slider or the row
   * moved */
  function show(f) {
    compute(f);
    for (var s = 0; s < 6; s++) drawStage(f, s);
    drawBars(f);
    mark(f);
  }
  function go(f, s) {
    f.stage = Math.max(0, Math.min(5, s));
    mark(f);
  }
  function pause(f) {
    clearInterval(f.timer);
    f.timer = null;
    f.play.textContent = "\u25b6 play";
  }
  function play(f) {
    if (f.timer) return pause(f);
    if (f.stage === 5) go(f, 0);
    f.play.textContent = "\u275a\u275a pause";
    f.timer = setInterval(function () {
      go(f, f.stage + 1);
      if (f.stage === 5) pause(f);
    }, PLAY_MS);
  }
  function canvasCell(f, s, e) {
    var c = f.canvas[s], b = c.getBoundingClientRect(), g = layout(f, s);
    var x = (e.clientX - b.left) * c.width / b.width - L;
    var y = (e.clientY - b.top) * c.height / b.height - TOP;
    var i = Math.floor(y / g.ch), j = Math.floor(x / g.cw);
    return i >= 0 && j >= 0 && i < f.m[s].rows && j < f.m[s].cols ?
      { i: i, j: j } : null;
  }
  function readout(f, s, p) {
    if (!p) return "";
    var m = f.m[s], k = p.i * m.cols + p.j, d = f.data;
    var at = STAGES[s].name + ", row " + p.i + " (" + tok(d, p.i) + "), " +
      (s === 5 ? "feature " + p.j : "col " + p.j + " (" + tok(d, p.j) + ")");
    if (m.mask && m.mask[k])
      return at + ": masked (the future: " +
        (s === 3 ? "-inf before the softmax)" : "weight exactly 0)");
    return at + ": " + String(m.v[k]);
  }
  function listen(f) {
    var out = f.section.querySelector(".tg-readout");
    f.canvas.forEach(function (c, s) {
      c.addEventListener("mousemove", function (e) {
        out.textContent = readout(f, s, canvasCell(f, s, e));
      });
      c.addEventListener("click", function (e) {
        var p = canvasCell(f, s, e);
        pause(f);
        f.stage = s;
        if (p) f.row = p.i;
        if (p) show(f); else mark(f);
      });
      f.caption[s].addEventListener("click", function () {
        pause(f);
        go(f, s);
      });
    });
    f.play.addEventListener("click", function () { play(f); });
    f.section.querySelector(".tg-strip-step").addEventListener(
      "click", function () { pause(f); go(f, f.stage + 1); });
    f.section.querySelector(".tg-strip-back").addEventListener(
      "click", function () { pause(f); go(f, f.stage - 1); });
    f.section.querySelector(".tg-strip-sqrt").addEventListener(
      "change", function (e) { f.sqrt = e.target.checked; show(f); });
    /* the keys, once the strip has the focus: arrows step, space plays */
    var strip = f.section.querySelector(".tg-strip");
    strip.tabIndex = 0;
    strip.addEventListener("keydown", function (e) {
      var k = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (k) { pause(f); go(f, f.stage + k); }
      else if (e.key === " ") play(f);
      else return;
      e.preventDefault();
    });
    var slider = f.section.querySelector(".tg-temperature");
    slider.addEventListener("input", function () {
      var t = parseFloat(slider.value);
      if (!(t > 0)) return;
      f.temp = t;
      f.section.querySelector(".tg-temperature-value").textContent = String(t);
      show(f);
    });
  }

  function setup(sec) {
    var d = JSON.parse(sec.querySelector("script.tg-data").textContent);
    var f = { section: sec, data: d, stage: 0, row: d.row, sqrt: true,
              temp: 1, timer: null, visited: [],
              panel: [].slice.call(sec.querySelectorAll(".tg-strip-panel")),
              bars: sec.querySelector(".tg-strip-bars"),
              play: sec.querySelector(".tg-strip-play"),
              where: sec.querySelector(".tg-strip-where"),
              rowText: sec.querySelector(".tg-strip-row") };
    f.canvas = f.panel.map(function (p) { return p.querySelector("canvas"); });
    f.caption = f.panel.map(function (p) {
      return p.querySelector("figcaption");
    });
    listen(f);
    show(f);
    api.figs[sec.id] = {
      stage: function () { return f.stage; },
      stages: STAGES.map(function (s) { return s.name; }),
      visited: f.visited,
      cellText: function (s, i, j) { return cellText(f, s, i, j); },
      value: function (s, i, j) { return f.m[s].v[i * f.m[s].cols + j]; },
      weights: function () { return f.m[4].v.slice(); },
      bars: function () { return bars(f); },
      cellBox: function (s, i, j) { /* canvas pixels of a cell */
        var g = layout(f, s);
        return { x: L + j * g.cw, y: TOP + i * g.ch, w: g.cw, h: g.ch };
      },
      row: function () { return f.row; },
      rowLine: function () { return f.rowText.textContent; }
    };
  }

  var secs = document.querySelectorAll('section.tg-section[data-kind="strip"]');
  if (secs.length) {
    var style = document.createElement("style");
    style.textContent = CSS;
    document.head.appendChild(style);
  }
  for (var i = 0; i < secs.length; i++) setup(secs[i]);
  api.ready = true;
})();
