/* tapegrad report: the backward stepper (tg_report_backward), drawn from
 * the section's JSON (every number is the library's; nothing is computed
 * here but colours, a softmax row's Jacobian diag(p) - p p^T from the
 * embedded p, and the check's pass / fail from the embedded analytic and
 * numeric values and tolerances).
 *
 * One entry at a time, from the loss (entry 1) down to the leaves: slider,
 * previous / next buttons, the arrow keys; "entry K of N". The forward
 * value on viridis (-inf grey: masked); gradients on a diverging scale
 * centred on 0 (symmetric range [-m, m], 0 the neutral light grey, red
 * positive, blue negative), exact zeros hatched in their cause's colour. N-d tensors are
 * shown as 2-D slices of their last two dims, a picker for the others.
 * Teacher mode hides each answer (the gradients, the rule's numbers, the
 * check) until "show". window.tgStepper is the page's interface for tests:
 * count, size, go, status, entry, cellCenter, panel, teacher. */
(function () {
  "use strict";

  var api = { ready: false, steppers: [] };
  window.tgStepper = api;
  var CAUSE = ["", "masked", "one-choice row",
               "not read by the loss, or cut by an op"];
  /* each cause its hatch colour, background and stroke direction (masked
   * "\\" on grey, one-choice crossed on orange, not read "/" on blue);
   * index 4: an exact zero of a gradient passed back, grey on neutral */
  var HATCH = ["", "#555", "#c46a00", "#1f5fc4", "#999"];
  var HATCH_BG = ["", "#d9d9d9", "#fde3bf", "#d6e6fb", "#f7f7f7"];
  function hatch(g, x, y, c, z) {
    g.fillStyle = HATCH_BG[z];
    g.fillRect(x, y, c, c);
    g.strokeStyle = HATCH[z]; g.lineWidth = 1;
    g.beginPath();
    for (var s = -c; s < c; s += 4) {
      if (z !== 3) { /* "\\" */
        g.moveTo(x + Math.max(0, s), y + Math.max(0, -s));
        g.lineTo(x + Math.min(c, s + c), y + Math.min(c, c - s));
      }
      if (z === 2 || z === 3) { /* "/" */
        g.moveTo(x + Math.max(0, s), y + c - Math.max(0, -s));
        g.lineTo(x + Math.min(c, s + c), y + c - Math.min(c, c - s));
      }
    }
    g.stroke();
  }

  function num(v) {
    if (typeof v !== "string") return v;
    return v === "nan" ? NaN : v === "inf" ? Infinity : -Infinity;
  }
  function fmt(x) {
    x = num(x);
    return !isFinite(x) ? String(x) : x === 0 ? "0" : x.toPrecision(6);
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* viridis, as the report's heatmaps */
  var VIR = [[68, 1, 84], [59, 82, 139], [33, 144, 141], [93, 201, 99],
             [253, 231, 37]];
  function viridis(t) {
    t = Math.max(0, Math.min(1, t || 0));
    var x = t * (VIR.length - 1), i = Math.min(Math.floor(x), VIR.length - 2);
    var f = x - i, a = VIR[i], b = VIR[i + 1];
    return "rgb(" + [0, 1, 2].map(function (c) {
      return Math.round(a[c] + f * (b[c] - a[c]));
    }).join(",") + ")";
  }
  /* diverging, the project's one convention (plot/scale.c): -1 blue, 0
   * the neutral light grey, 1 red */
  var DIV = [[33, 102, 172], [146, 197, 222], [247, 247, 247],
             [244, 165, 130], [178, 24, 43]];
  function diverging(t) {
    var x = (Math.max(-1, Math.min(1, t)) + 1) * 2;
    var i = Math.min(Math.floor(x), 3), f = x - i, a = DIV[i], b = DIV[i + 1];
    return "rgb(" + [0, 1, 2].map(function (c) {
      return Math.round(a[c] + f * (b[c] - a[c]));
    }).join(",") + ")";
  }


  /* ---- a heatmap of one 2-D slice -------------------------------------- */
  /* shape: the tensor's; v: its values (C order); opt.signed: diverging
   * around 0; opt.zero: cause codes for hatching; opt.onclick(flat). */
  function Heat(box, title, shape, v, opt) {
    var h = this;
    h.shape = shape.length ? shape : [1];
    h.v = v; h.opt = opt;
    var nd = h.shape.length;
    h.R = nd >= 2 ? h.shape[nd - 2] : 1;
    h.C = h.shape[nd - 1];
    h.lead = h.shape.slice(0, Math.max(0, nd - 2));
    h.pick = h.lead.map(function () { return 0; });
    var wrap = el("div", "tg-bw-heat");
    wrap.style.flex = "1 1 320px";
    wrap.style.minWidth = "0";
    wrap.appendChild(el("div", "tg-bw-title", title));
    var picker = el("div", "tg-bw-picker");
    h.lead.forEach(function (n, d) {
      var s = el("select");
      s.setAttribute("aria-label", "index of dim " + d);
      for (var i = 0; i < n; i++) s.appendChild(el("option", "", String(i)));
      s.addEventListener("change", function () {
        h.pick[d] = +s.value; h.draw();
        if (h.opt.onpick) h.opt.onpick(h.pick);
      });
      picker.appendChild(document.createTextNode(" dim " + d + ": "));
      picker.appendChild(s);
    });
    if (h.lead.length) wrap.appendChild(picker);
    h.canvas = el("canvas");
    h.canvas.style.maxWidth = "100%";
    wrap.appendChild(h.canvas);
    h.bar = el("canvas", "tg-bw-bar-colours");
    h.bar.width = 200; h.bar.height = 10;
    h.bar.style.display = "block";
    wrap.appendChild(h.bar);
    h.scale = el("div", "tg-bw-scale");
    wrap.appendChild(h.scale);
    h.read = el("div", "tg-bw-readout", "\u00a0");
    wrap.appendChild(h.read);
    box.appendChild(wrap);
    var m = 0;
    for (var i = 0; i < v.length; i++) {
      var x = Math.abs(num(v[i]));
      if (isFinite(x) && x > m) m = x;
    }
    h.max = m;
    h.lo = Infinity; h.hi = -Infinity;
    h.masked = false;
    v.forEach(function (y) {
      y = num(y);
      if (isFinite(y)) { h.lo = Math.min(h.lo, y); h.hi = Math.max(h.hi, y); }
      else h.masked = true;
    });
    h.canvas.addEventListener("mousemove", function (e) {
      var f = h.at(e); h.read.textContent = f < 0 ? "\u00a0" : h.text(f);
    });
    h.canvas.addEventListener("click", function (e) {
      var f = h.at(e);
      if (f >= 0 && h.opt.onclick) h.opt.onclick(f, h);
    });
    h.draw();
  }
  /* shows the slice pick (indices of the leading dims), pickers too */
  Heat.prototype.setPick = function (pick) {
    var sels = this.canvas.parentNode.querySelectorAll("select");
    for (var d = 0; d < this.pick.length; d++) {
      this.pick[d] = pick[d];
      sels[d].value = String(pick[d]);
    }
    this.draw();
  };
  Heat.prototype.base = function () {
    var b = 0, stride = this.R * this.C;
    for (var d = this.lead.length - 1; d >= 0; d--) {
      b += this.pick[d] * stride;
      stride *= this.lead[d];
    }
    return b;
  };
  Heat.prototype.cell = function () {
    var w = this.canvas.parentNode.clientWidth || 300;
    return Math.max(3, Math.min(28, Math.floor((w - 40) / this.C)));
  };
  /* the colour bar: what the colours mean, its ends labelled */
  Heat.prototype.drawBar = function () {
    var g = this.bar.getContext("2d"), n = this.bar.width;
    for (var i = 0; i < n; i++) {
      var t = i / (n - 1);
      g.fillStyle = this.opt.signed ? diverging(2 * t - 1) : viridis(t);
      g.fillRect(i, 0, 1, this.bar.height);
    }
    g.strokeStyle = "#999";
    g.strokeRect(0.5, 0.5, n - 1, this.bar.height - 1);
  };
  Heat.prototype.draw = function () {
    var h = this, c = h.cell(), pad = 30;
    h.px = c;
    h.canvas.width = pad + h.C * c + 4;
    h.canvas.height = pad + h.R * c + 4;
    var g = h.canvas.getContext("2d"), b = h.base();
    g.fillStyle = "#fff"; g.fillRect(0, 0, h.canvas.width, h.canvas.height);
    var nd = h.shape.length;
    g.fillStyle = "#333"; g.font = "11px sans-serif";
    g.fillText("column (dim " + (nd - 1) + ") \u2192", pad, 12);
    g.save(); g.translate(12, pad); g.rotate(Math.PI / 2);
    g.fillText(nd >= 2 ? "row (dim " + (nd - 2) + ") \u2192" : "", 0, 0);
    g.restore();
    for (var r = 0; r < h.R; r++)
      for (var k = 0; k < h.C; k++) {
        var f = b + r * h.C + k, x = pad + k * c, y = pad + r * c;
        var val = num(h.v[f]);
        g.fillStyle = !isFinite(val) ? "#bbb" :
          h.opt.signed ? diverging(h.max ? val / h.max : 0) :
          viridis(h.hi > h.lo ? (val - h.lo) / (h.hi - h.lo) : 0.5);
        g.fillRect(x, y, c, c);
        var z = h.opt.zero ? h.opt.zero[f] : h.opt.signed ? 4 : 0;
        if (z && val === 0) hatch(g, x, y, c, z);
      }
    h.drawBar();
    h.scale.textContent = h.opt.signed ?
      "-" + fmt(h.max) + " (blue) \u2014 0 (light grey) \u2014 +" + fmt(h.max) +
      " (red), centred on 0; hatched: exactly 0" :
      fmt(h.lo) + " (dark) to " + fmt(h.hi) + " (light)" +
      (h.masked ? "; grey: -inf (masked)" : "");
  };
  Heat.prototype.at = function (e) {
    var r = this.canvas.getBoundingClientRect();
    var x = (e.clientX - r.left) * this.canvas.width / r.width - 30;
    var y = (e.clientY - r.top) * this.canvas.height / r.height - 30;
    var col = Math.floor(x / this.px), row = Math.floor(y / this.px);
    if (col < 0 || row < 0 || col >= this.C || row >= this.R) return -1;
    return this.base() + row * this.C + col;
  };
  Heat.prototype.index = function (f) {
    var idx = [], s = this.shape;
    for (var d = s.length - 1; d >= 0; d--) { idx.unshift(f % s[d]); f = Math.floor(f / s[d]); }
    return "[" + idx.join(", ") + "]";
  };
  Heat.prototype.text = function (f) {
    var z = this.opt.zero ? this.opt.zero[f] : 0;
    return this.index(f) + " = " + fmt(this.v[f]) + (z ? "  (exact 0: " + CAUSE[z] + ")" : "");
  };
  /* viewport centre of flat cell f, after showing its slice */
  Heat.prototype.center = function (f) {
    var per = this.R * this.C, rest = Math.floor(f / per), inner = f % per;
    for (var d = this.lead.length - 1; d >= 0; d--) {
      this.pick[d] = rest % this.lead[d]; rest = Math.floor(rest / this.lead[d]);
    }
    var sels = this.canvas.parentNode.querySelectorAll("select");
    for (var i = 0; i < sels.length; i++) sels[i].value = String(this.pick[i]);
    this.draw();
    this.canvas.scrollIntoView({ block: "center" });
    var r = this.canvas.getBoundingClientRect(), k = r.width / this.canvas.width;
    return { x: r.left + (30 + (inner % this.C + 0.5) * this.px) * k,
             y: r.top + (30 + (Math.floor(inner / this.C) + 0.5) * this.px) * k };
  };

  /* ---- an answer teacher mode hides ------------------------------------ */
  function answer(st, box) {
    var a = el("div", "tg-bw-answer"), b = el("button", "tg-bw-show", "show");
    var body = el("div", "tg-bw-body");
    b.type = "button";
    a.appendChild(b); a.appendChild(body);
    function reveal(on) {
      body.style.display = on ? "" : "none";
      b.style.display = on ? "none" : "";
    }
    b.addEventListener("click", function () { reveal(true); });
    reveal(!st.teacher);
    box.appendChild(a);
    return body;
  }

  /* ---- a softmax row: its numbers and Jacobian ------------------------- */
  function scroller(table) {
    var d = el("div");
    d.style.overflowX = "auto";
    d.appendChild(table);
    return d;
  }
  function softmaxRow(e, f, box) {
    var s = e.shape, d = e.dim, n = s[d];
    if (d !== s.length - 1) {
      box.appendChild(el("p", "", "softmax along dim " + d + ": rows along the last dim only"));
      return null;
    }
    var start = f - f % n, p = [], dy = [], dot = 0;
    for (var j = 0; j < n; j++) {
      p.push(num(e.value[start + j])); dy.push(num(e.dy[start + j]));
      dot += p[j] * dy[j];
    }
    var t = el("table", "tg-table tg-bw-row"), rows = [["j"], ["p_j"], ["dy_j"],
      ["dy_j - sum(p dy)"], ["dx_j = p_j (dy_j - sum(p dy))"]];
    for (j = 0; j < n; j++) {
      rows[0].push(String(j)); rows[1].push(fmt(p[j])); rows[2].push(fmt(dy[j]));
      rows[3].push(fmt(dy[j] - dot)); rows[4].push(fmt(p[j] * (dy[j] - dot)));
    }
    rows.forEach(function (r, i) {
      var tr = el("tr");
      r.forEach(function (c) { tr.appendChild(el(i ? "td" : "th", "", c)); });
      t.appendChild(tr);
    });
    box.appendChild(el("p", "", "row starting at flat cell " + start +
      ": sum(p * dy) = " + fmt(dot)));
    box.appendChild(scroller(t));
    var J = el("table", "tg-table tg-bw-jac"), head = el("tr");
    head.appendChild(el("th", "", "J = diag(p) - p p^T"));
    for (j = 0; j < n; j++) head.appendChild(el("th", "", String(j)));
    J.appendChild(head);
    for (var i = 0; i < n; i++) {
      var tr = el("tr");
      tr.appendChild(el("th", "", String(i)));
      for (j = 0; j < n; j++)
        tr.appendChild(el("td", "", fmt((i === j ? p[i] : 0) - p[i] * p[j])));
      J.appendChild(tr);
    }
    box.appendChild(scroller(J));
    return { p: p, dy: dy, dot: dot };
  }

  /* ---- one input's gradient and its check ------------------------------ */
  function check(st, inp, f) {
    var q = inp.cells.indexOf(f);
    if (q < 0) return null;
    var a = num(inp.analytic[q]), n = num(inp.numeric[q]);
    var diff = Math.abs(a - n), tol = st.data.atol + st.data.rtol * Math.abs(n);
    return { cell: f, analytic: a, numeric: n, diff: diff, tol: tol, pass: diff <= tol };
  }
  function showInput(st, e, inp, box) {
    var origin = inp.from >= 0 ? "the output of entry " + (inp.from + 1) : "a leaf";
    box.appendChild(el("h4", "", "to input " + inp.i + ": " + (inp.name || "(unnamed)") +
      " (" + inp.shape.join(", ") + "), " + origin));
    var body = answer(st, box), panel = el("div", "tg-bw-check", "click a cell for its check");
    var h = new Heat(body, "d(loss)/d(" + (inp.name || "input " + inp.i) +
      ") through this entry: what the rule passes back", inp.shape, inp.dx,
      { signed: true, onclick: function (f) {
        var c = check(st, inp, f);
        panel.textContent = !c ? "cell " + h.index(f) + " was not checked (sampled: every " +
          Math.round(inp.dx.length / inp.cells.length) + "th cell)" :
          "cell " + h.index(f) + ": analytic " + fmt(c.analytic) + ", numeric " +
          fmt(c.numeric) + ", |difference| " + c.diff.toExponential(2) +
          (c.pass ? " <= " : " > ") + c.tol.toExponential(2) + ": " +
          (c.pass ? "pass" : "FAIL");
        panel.setAttribute("data-pass", c ? String(c.pass) : "");
      } });
    body.appendChild(panel);
    body.appendChild(el("p", "tg-bw-note", inp.sampled ?
      inp.cells.length + " of " + inp.dx.length + " cells checked, evenly sampled" :
      "every cell checked: the entry's backward against (f(x + h e_i) - f(x - h e_i)) . dy / 2h, h = " +
      st.data.eps + ", in float64"));
    st.heats.push({ which: "input" + inp.i, heat: h, panel: panel });
  }

  /* ---- the stepper ----------------------------------------------------- */
  function counts(e) {
    var z = e.zeros;
    return "exact zeros in dL/d(out): " + z.total + " of " + e.dy.length +
      " \u2014 masked " + z.masked + ", one-choice row " + z.one_choice +
      ", not read by the loss (or cut by an op) " + z.not_read;
  }
  function render(st) {
    var e = st.data.entries[st.k], N = st.data.entries.length, v = st.view;
    st.pos.textContent = "entry " + (st.k + 1) + " of " + N;
    st.slider.value = String(st.k);
    v.textContent = "";
    st.heats = [];
    v.appendChild(el("h3", "", "#" + (st.k + 1) + " " + e.op + " \u2192 " +
      (e.name || "(unnamed)") + " (" + e.shape.join(", ") + ")" +
      (e.site ? "   at " + e.site : "")));
    var rule = el("pre", "tg-bw-rule", "rule: " + e.rule);
    rule.style.whiteSpace = "pre-wrap";
    v.appendChild(rule);
    var row = el("div", "tg-bw-row-box");
    row.style.display = "flex"; row.style.flexWrap = "wrap"; row.style.gap = "0 24px";
    var hv = new Heat(row, "forward value of " + (e.name || "the output"), e.shape, e.value,
      { signed: false, onclick: function (f) { pick(f); } });
    st.heats.push({ which: "value", heat: hv });
    var body = answer(st, row);
    body.parentNode.style.flex = "1 1 320px";
    body.parentNode.style.minWidth = "0";
    var hd = new Heat(body, "upstream gradient dL/d(" + (e.name || "out") + ")", e.shape,
      e.dy, { signed: true, zero: e.zero, onclick: function (f) { pick(f); } });
    var zc = el("p", "tg-bw-zeros", counts(e));
    body.appendChild(zc);
    var leg = el("p", "tg-bw-legend");
    [1, 2, 3].forEach(function (c) {
      var k = el("canvas");
      k.width = k.height = 14;
      k.style.verticalAlign = "middle";
      hatch(k.getContext("2d"), 0, 0, 14, c);
      var s = el("span", "", " " + CAUSE[c] + "   ");
      s.style.color = HATCH[c];
      leg.appendChild(k); leg.appendChild(s);
    });
    body.appendChild(leg);
    st.heats.push({ which: "dy", heat: hd });
    /* the value and its gradient show the same slice */
    hv.opt.onpick = function (p) { hd.setPick(p); };
    hd.opt.onpick = function (p) { hv.setPick(p); };
    v.appendChild(row);
    var rowBox = el("div", "tg-bw-softmax");
    function pick(f) {
      if (e.op !== "softmax") return;
      rowBox.textContent = "";
      softmaxRow(e, f, answer(st, rowBox));
    }
    if (e.op === "softmax") {
      rowBox.appendChild(el("p", "", "click a row of the value or the gradient for its numbers and Jacobian"));
      v.appendChild(rowBox);
    }
    e.inputs.forEach(function (inp) { showInput(st, e, inp, v); });
    if (!e.inputs.length) v.appendChild(el("p", "", "no input requires grad"));
  }
  function build(sec, data) {
    var box = sec.querySelector(".tg-stepper");
    var st = { sec: sec, data: data, k: 0, teacher: false, heats: [] };
    var bar = el("div", "tg-bw-bar");
    var prev = el("button", "tg-bw-prev", "\u25c0 previous");
    var next = el("button", "tg-bw-next", "next \u25b6");
    prev.type = next.type = "button";
    st.slider = el("input", "tg-bw-slider");
    st.slider.type = "range"; st.slider.min = "0";
    st.slider.max = String(data.entries.length - 1);
    st.slider.setAttribute("aria-label", "tape entry");
    st.pos = el("span", "tg-bw-pos");
    st.pos.style.margin = "0 1em";
    var tl = el("label", "tg-bw-teacher"), tc = el("input");
    tc.type = "checkbox";
    tl.appendChild(tc); tl.appendChild(document.createTextNode(" teacher mode"));
    [prev, st.slider, next, st.pos, tl].forEach(function (x) { bar.appendChild(x); });
    st.view = el("div", "tg-bw-view");
    box.appendChild(bar); box.appendChild(st.view);
    st.go = function (k) {
      st.k = Math.max(0, Math.min(data.entries.length - 1, k)); render(st);
      return st.pos.textContent;
    };
    prev.addEventListener("click", function () { st.go(st.k - 1); });
    next.addEventListener("click", function () { st.go(st.k + 1); });
    st.slider.addEventListener("input", function () { st.go(+st.slider.value); });
    sec.tabIndex = 0;
    /* the arrows step (the slider's own steps replaced, not added to);
     * Home and End go to the loss and to the last entry; a slice picker
     * keeps its arrows */
    sec.addEventListener("keydown", function (ev) {
      if (ev.target.tagName === "SELECT") return;
      if (ev.key === "ArrowRight" || ev.key === "ArrowDown") st.go(st.k + 1);
      else if (ev.key === "ArrowLeft" || ev.key === "ArrowUp") st.go(st.k - 1);
      else if (ev.key === "Home") st.go(0);
      else if (ev.key === "End") st.go(data.entries.length - 1);
      else return;
      ev.preventDefault();
    });
    tc.addEventListener("change", function () { st.teacher = tc.checked; render(st); });
    st.teacherBox = tc;
    if (data.entries.length) render(st);
    api.steppers.push(st);
  }

  function find(s, which) {
    var st = api.steppers[s];
    for (var i = 0; i < st.heats.length; i++)
      if (st.heats[i].which === which) return st.heats[i];
    throw new Error("tgStepper: no " + which + " in entry " + (st.k + 1));
  }
  api.count = function () { return api.steppers.length; };
  api.size = function (s) { return api.steppers[s].data.entries.length; };
  api.go = function (s, k) { return api.steppers[s].go(k); };
  api.status = function (s) { return api.steppers[s].pos.textContent; };
  api.entry = function (s) { var st = api.steppers[s]; return st.data.entries[st.k]; };
  api.data = function (s) { return api.steppers[s].data; };
  api.cellCenter = function (s, which, f) { return find(s, which).heat.center(f); };
  api.panel = function (s, which) { return find(s, which).panel.textContent; };
  api.teacher = function (s, on) {
    var st = api.steppers[s];
    st.teacherBox.checked = on; st.teacher = on; render(st);
  };

  var secs = document.querySelectorAll('section.tg-section[data-kind="backward"]');
  for (var i = 0; i < secs.length; i++) {
    var d = secs[i].querySelector("script.tg-data");
    if (d) build(secs[i], JSON.parse(d.textContent));
  }
  window.addEventListener("resize", function () {
    api.steppers.forEach(function (st) { st.heats.forEach(function (h) { h.heat.draw(); }); });
  });
  api.ready = true;
})();
