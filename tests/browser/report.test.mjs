// The report pages in a real, headless Chromium (playwright-core driving
// Debian's /usr/bin/chromium; tests/browser.test runs this).
//
//     node report.test.mjs DIR [--examples]
//
// DIR holds what tests/report_pages wrote: known.html, big.html and
// expected.json, the values the library computed, and in DIR/missing the
// same written with neither gnuplot nor dot on PATH; with --examples also
// the example programs' pages NAME.html and what they printed, NAME.out
// (tests/browser.test runs them). Each check prints one line, "ok - ..." or
// "FAIL - ..." (TG_BROWSER_TIMES=1: each prefixed with the milliseconds
// since the start); the exit status is 1 when any failed.
//
// Canvases are checked for drawn pixels with getImageData in the page (they
// are untainted: their only images are data: URLs), falling back to a
// screenshot of the element (Chromium's PNG, decoded here with node's zlib)
// should one be tainted; the heatmap's cell colours are read from a
// screenshot of the viewport, i.e. what the screen shows.
import { chromium } from 'playwright-core';
import { readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { decodePng } from './png.mjs';

const CSP = "default-src 'none'; script-src 'unsafe-inline'; " +
  "style-src 'unsafe-inline'; img-src data:";
const BIG_PAGE_BOUND = 2 << 20; // bytes: a 1000 x 1000 heatmap, downsampled

let failures = 0;
const started = Date.now();
function check(ok, what, detail) {
  if (!ok) failures++;
  const at = process.env.TG_BROWSER_TIMES ? `[${Date.now() - started} ms] ` : '';
  console.log(`${at}${ok ? 'ok' : 'FAIL'} - ${what}${ok || !detail ? '' : `: ${detail}`}`);
  return ok;
}

// ---- numbers --------------------------------------------------------------

// The significant digits of a decimal string: "-0.000120" -> "12",
// "1.2e-07" -> "12", "25000000000.0" -> "25".
function digits(s) {
  const m = String(s).trim().toLowerCase().replace(/^[-+]/, '').split('e')[0];
  return m.replace('.', '').replace(/^0+/, '').replace(/0+$/, '') || '0';
}
// The page's value and the library's: the same number with the same
// (shortest) digits, whatever the notation ("1e-7" and "1e-07" agree).
function sameShortest(page, lib) {
  if (['nan', 'inf', '-inf', 'masked'].includes(lib)) return page === lib;
  return Number(page) === Number(lib) && digits(page) === digits(lib);
}
// toPrecision(6) of the library's value, allowing the other rounding only
// where the value lies within 1e-12 (relative) of a rounding boundary.
function samePrecision6(page, lib) {
  if (page === lib.toPrecision(6)) return true;
  const a = lib * (1 + 1e-12), b = lib * (1 - 1e-12);
  return page === a.toPrecision(6) || page === b.toPrecision(6);
}

// ---- PNG screenshots ------------------------------------------------------


// The share of a screenshot's pixels that differ from its most common
// colour (the background), and how many colours it has.
function inked(png) {
  const { width, height, rgba } = decodePng(png);
  const count = new Map();
  for (let i = 0; i < width * height; i++) {
    const key = rgba.readUInt32BE(i * 4);
    count.set(key, (count.get(key) || 0) + 1);
  }
  const background = Math.max(...count.values());
  return { share: 1 - background / (width * height), colours: count.size, how: 'screenshot' };
}

// The same, read in the page from the canvas itself (getImageData: the
// canvases here are untainted, their images being data: URLs); null when
// the canvas is tainted, and the screenshot is read instead.
function inkedCanvas(canvas) {
  let data;
  try {
    data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  } catch (e) {
    return null;
  }
  const count = new Map();
  for (let i = 0; i < data.length; i += 4) {
    // transparent pixels show the page's background: count them as one colour
    const key = data[i + 3] === 0 ? -1 : ((data[i] << 24) | (data[i + 1] << 16) | (data[i + 2] << 8) | data[i + 3]);
    count.set(key, (count.get(key) || 0) + 1);
  }
  let background = 0;
  for (const n of count.values()) background = Math.max(background, n);
  return { share: 1 - background / (data.length / 4), colours: count.size, how: 'getImageData' };
}

// ---- the page -------------------------------------------------------------

// Opens file in a new page, recording console errors, page errors and every
// request; checks the load is clean and the page ready.
async function open(browser, file, name) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const url = pathToFileURL(resolve(file)).href;
  const errors = [], requests = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('request', (r) => {
    if (r.url() !== url && !r.url().startsWith('data:')) requests.push(r.url());
  });
  await page.goto(url, { waitUntil: 'load' });
  let ready = true;
  try {
    await page.waitForFunction(() => window.tgReport && window.tgReport.ready === true,
      null, { timeout: 10000 });
  } catch (e) {
    ready = false;
  }
  check(ready, `${name}: window.tgReport.ready`);
  const csp = await page.$eval('head meta[http-equiv="Content-Security-Policy"]',
    (m) => m.getAttribute('content')).catch(() => null);
  check(csp === CSP, `${name}: the Content-Security-Policy meta`, csp);
  const finish = () => {
    check(errors.length === 0, `${name}: no console or page errors`, errors.join(' | '));
    check(requests.length === 0, `${name}: no requests beyond the page and data: URLs`,
      requests.join(' '));
  };
  return { page, finish };
}

// Every canvas of every figure section shows drawn pixels (getImageData, or
// a screenshot of the element), unless the section says a tool is missing.
async function checkCanvases(page, name) {
  const sections = await page.$$eval('section.tg-section', (ss) => ss.map((s) => ({
    id: s.id, kind: s.dataset.kind, missing: !!s.querySelector('.tg-missing'),
    canvases: s.querySelectorAll('canvas').length,
  })));
  for (const s of sections) {
    if (!['heatmap', 'lines', 'averaging', 'attention'].includes(s.kind)) continue;
    if (s.missing) {
      check(true, `${name} ${s.id} (${s.kind}): says what is missing`);
      continue;
    }
    if (!check(s.canvases > 0, `${name} ${s.id} (${s.kind}): has a canvas`)) continue;
    const canvases = await page.$$(`#${s.id} canvas`);
    for (let i = 0; i < canvases.length; i++) {
      await canvases[i].scrollIntoViewIfNeeded();
      const box = await canvases[i].boundingBox();
      if (!box || box.width < 2 || box.height < 2) continue; // a hidden helper canvas
      const ink = await canvases[i].evaluate(inkedCanvas).catch(() => null) ||
        inked(await canvases[i].screenshot());
      check(ink.share > 0.01 && ink.colours >= 3,
        `${name} ${s.id} (${s.kind}) canvas ${i}: drawn, ${(100 * ink.share).toFixed(1)}% ` +
        `of pixels off the background, ${ink.colours} colours (${ink.how})`);
    }
  }
  return sections;
}

async function readout(page, id, sel = '.tg-readout') {
  return page.$eval(`#${id} ${sel}`, (e) => e.textContent.trim()).catch(() => null);
}

// Moves the real mouse to (x, y): one move, after a one-pixel step aside
// when the mouse is there already (so a mousemove is still dispatched).
const lastMouse = new WeakMap();
async function mouseTo(page, { x, y }) {
  const last = lastMouse.get(page);
  if (last && last.x === x && last.y === y) await page.mouse.move(x + 1, y + 1);
  await page.mouse.move(x, y);
  lastMouse.set(page, { x, y });
}

// The real mouse over cell (row, col) of section id; the readout then (and
// with both, the attention figure's row statistics too).
async function hoverCell(page, id, row, col, both = false) {
  await mouseTo(page, await page.evaluate(([i, r, c]) => window.tgReport.cellCenter(i, r, c), [id, row, col]));
  const [text, stats] = await page.$eval(`#${id}`, (s) => ['.tg-readout', '.tg-rowstats'].map((q) => {
    const e = s.querySelector(q);
    return e ? e.textContent.trim() : null;
  }));
  return both ? [text, stats] : text;
}

// The heatmap drawn as cells: at each checked cell the colour is the same
// at its centre and a quarter cell away on each side (no smoothing across
// cells), masked cells grey, and masked, nan, inf and -inf four different
// colours. Sampled from a screenshot of the viewport at tgReport.cellCenter.
async function heatmapPixels(page, hm) {
  const at = (r, c) => page.evaluate(([i, a, b]) => window.tgReport.cellCenter(i, a, b), [hm.id, r, c]);
  const c00 = await at(0, 0), c11 = await at(1, 1);
  const centres = [];
  for (const c of hm.cells) centres.push(await at(c.row, c.col));
  const shot = decodePng(await page.screenshot());
  const pixel = (x, y) => {
    const i = (Math.round(y) * shot.width + Math.round(x)) * 4;
    return [shot.rgba[i], shot.rgba[i + 1], shot.rgba[i + 2]];
  };
  const near = (a, b) => a.every((v, k) => Math.abs(v - b[k]) <= 2);
  const dx = Math.abs(c11.x - c00.x) / 4, dy = Math.abs(c11.y - c00.y) / 4;
  const colour = {};
  hm.cells.forEach((c, k) => {
    const { x, y } = centres[k], mid = pixel(x, y);
    const same = [[dx, 0], [-dx, 0], [0, dy], [0, -dy]].every(([u, v]) => near(pixel(x + u, y + v), mid));
    check(same, `heatmap: cell (${c.row},${c.col}) drawn as one colour rgb(${mid}) ` +
      `within a quarter cell of its centre`, 'the colour changes inside the cell (smoothed?)');
    if (['masked', 'nan', 'inf', '-inf'].includes(c.value)) colour[c.value] = mid;
  });
  const special = Object.entries(colour);
  check(colour.masked && Math.max(...colour.masked) - Math.min(...colour.masked) <= 8,
    `heatmap: masked cells grey (rgb(${colour.masked}))`);
  check(special.length === 4 && special.every(([a, x]) => special.every(([b, y]) => a === b || !near(x, y))),
    'heatmap: masked, nan, inf and -inf in four distinct colours',
    special.map(([k, v]) => `${k} rgb(${v})`).join(', '));
}

// ---- the known page -------------------------------------------------------

async function knownPage(browser, dir, ex) {
  const { page, finish } = await open(browser, join(dir, ex.page), 'known');
  check(await page.title() === 'known content <&> "report"', 'known: the title, escaped',
    await page.title());
  await checkCanvases(page, 'known');

  // text: the heading and paragraph show their raw characters
  const text = await page.$eval(`#${ex.text.id}`, (s) => ({
    h2: s.querySelector('h2').textContent, all: s.textContent,
    tags: s.querySelectorAll('i, b, script').length,
  }));
  check(text.h2 === ex.text.heading && text.all.includes(ex.text.body) && text.tags === 0,
    'text: heading and paragraph escaped (raw characters shown, no tags made)',
    JSON.stringify(text));

  // heatmap: readout of known cells
  const hm = ex.heatmap;
  const h2 = await page.$eval(`#${hm.id} h2`, (e) => e.textContent);
  check(h2 === 'weights <&> "quoted"', 'heatmap: title escaped', h2);
  for (const c of hm.cells) {
    const got = await hoverCell(page, hm.id, c.row, c.col);
    const ok = got !== null && got.startsWith(c.prefix) &&
      sameShortest(got.slice(c.prefix.length), c.value);
    check(ok, `heatmap: hover (${c.row},${c.col}) reads "${got}" (the library prints ${c.value})`,
      `expected "${c.prefix}${c.value}"`);
  }
  await heatmapPixels(page, hm);
  // gnuplot's tick labels drawn with their characters ("a<b", not "a b"):
  // the figure redrawn with its text calls recorded (gnuplot.T, and
  // gnuplot.TR for the rotated x labels; the text is the last argument)
  const drawn = await page.evaluate((id) => {
    const canvas = document.querySelector(`#${id} canvas.tg-gnuplot`);
    const gp = window.gnuplot;
    if (!canvas || !gp || typeof window[canvas.id] !== 'function') return null;
    const texts = [], T = gp.T, TR = gp.TR;
    gp.T = function (...a) { texts.push(a[a.length - 1]); return T.apply(this, a); };
    gp.TR = function (...a) { texts.push(a[a.length - 1]); return TR.apply(this, a); };
    try { window[canvas.id](); } finally { gp.T = T; gp.TR = TR; }
    return texts;
  }, hm.id);
  if (drawn !== null) {
    const lost = hm.labels.filter((l) => !drawn.includes(l));
    check(lost.length === 0, 'heatmap: gnuplot draws every tick label as given (< & " \' kept)',
      `not drawn: ${JSON.stringify(lost)}; drawn: ${JSON.stringify(drawn)}`);
  }
  const bbox = await page.$eval(`#${hm.id}`, (e) => e.getBoundingClientRect().toJSON());
  await page.mouse.move(bbox.x + bbox.width - 2, bbox.y + 2);
  const left = await readout(page, hm.id);
  const ltxt = hm.cells.map((c) => c.prefix);
  check(!ltxt.some((p) => left && left.startsWith(p)), 'heatmap: mouse off the cells clears the readout',
    `"${left}"`);

  // lines: the nearest point's readout
  for (const p of ex.lines.points) {
    const xy = await page.evaluate(([i, s, k]) => window.tgReport.pointCenter(i, s, k),
      [ex.lines.id, p.series, p.i]);
    await mouseTo(page, xy);
    const got = await readout(page, ex.lines.id);
    const m = got && got.match(/^(.*) x = (\S+): y = (\S+)$/);
    check(m && m[1] === p.label && sameShortest(m[2], p.x) && sameShortest(m[3], p.y),
      `lines: hover ${p.label}[${p.i}] reads "${p.label} x = ${p.x}: y = ${p.y}"`, `got "${got}"`);
  }

  // attention: the slider, weights(id), the readout and the row's statistics
  const at = ex.attention, tokens = ex.tokens;
  const slider = `#${at.id} input.tg-temperature`;
  const initial = await page.$eval(slider, (e) => Number(e.value)).catch(() => null);
  check(initial === at.initial, `attention: the slider starts at the call's temperature ${at.initial}`,
    `${initial}`);
  for (const t of at.temperatures) {
    const T = t.temperature;
    const took = await page.$eval(slider, (e, v) => {
      e.value = String(v);
      e.dispatchEvent(new Event('input', { bubbles: true }));
      return Number(e.value);
    }, T);
    if (!check(took === T, `attention: the slider takes temperature ${T}`,
      `value reads ${took} (min/max/step?)`)) continue;
    const shown = await page.$eval(`#${at.id} .tg-temperature-value`, (e) => e.textContent).catch(() => null);
    check(shown !== null && Math.abs(Number(shown.replace(/[^0-9.eE+-]/g, '')) - T) <= 1e-9 * T,
      `attention T=${T}: .tg-temperature-value shows it`, `"${shown}"`);
    const w = await page.evaluate((id) => window.tgReport.weights(id), at.id);
    let worst = 0, shape = Array.isArray(w) && w.length === tokens.length;
    for (let i = 0; shape && i < tokens.length; i++) {
      shape = Array.isArray(w[i]) && w[i].length === tokens.length;
      for (let j = 0; shape && j < tokens.length; j++) {
        const lib = t.weights[i][j];
        if ((lib === null) !== (w[i][j] === null)) shape = false;
        else if (lib !== null) worst = Math.max(worst, Math.abs(w[i][j] - lib));
      }
    }
    check(shape && worst <= 1e-12,
      `attention T=${T}: weights(id) equal tg_softmax's (max |diff| ${worst.toExponential(2)})`,
      shape ? '' : `shape or masked entries differ: ${JSON.stringify(w)}`);
    for (const [r, c] of at.cells) {
      const prefix = `row ${r} (${tokens[r]}), col ${c} (${tokens[c]}): `;
      const [got, stats] = await hoverCell(page, at.id, r, c, true);
      const lib = t.weights[r][c];
      check(got !== null && got.startsWith(prefix) && samePrecision6(got.slice(prefix.length), lib),
        `attention T=${T}: hover (${r},${c}) reads ${lib.toPrecision(6)}`, `got "${got}"`);
      const m = stats && stats.match(/^entropy (\S+) nats, gain (\S+)$/);
      check(m && samePrecision6(m[1], t.entropy[r]) && samePrecision6(m[2], t.gain[r]),
        `attention T=${T}: row ${r} entropy ${t.entropy[r].toPrecision(6)} nats, ` +
        `gain ${t.gain[r].toPrecision(6)} (tg_jacobian)`, `got "${stats}"`);
    }
    for (const [r, c] of at.masked) {
      const got = await hoverCell(page, at.id, r, c);
      check(got === `row ${r} (${tokens[r]}), col ${c} (${tokens[c]}): masked`,
        `attention T=${T}: hover (${r},${c}) reads masked`, `got "${got}"`);
    }
  }

  // averaging: a click on a row lists the tokens it averages
  for (const row of [0, 3, 6].map((r) => ex.averaging.rows[r])) {
    const p = await page.evaluate(([i, r]) => window.tgReport.cellCenter(i, r, 0),
      [ex.averaging.id, row.row]);
    await page.mouse.click(p.x, p.y);
    const got = await readout(page, ex.averaging.id);
    const want = `row ${row.row} (${tokens[row.row]}) averages: ` +
      tokens.slice(0, row.n).join(', ') + ' (each ';
    const m = got && got.startsWith(want) && got.slice(want.length).match(/^(\S+)\)$/);
    check(m && Math.abs(Number(m[1]) - row.each) <= 1e-6 * row.each,
      `averaging: click row ${row.row} lists ${tokens.slice(0, row.n).join(', ')} (each ${row.each.toPrecision(4)})`,
      `got "${got}"`);
  }

  // tape: one node per entry and per leaf drawn, the names, the zeros
  const tp = ex.tape;
  const nodes = await page.$$eval(`#${tp.id} svg g.node`, (gs) => gs.map((g) => ({
    title: (g.querySelector('title') || {}).textContent || '',
    tip: [...g.querySelectorAll('a')].map((a) => a.getAttribute('xlink:title') ||
      a.getAttribute('title') || '').join(' '),
    texts: [...g.querySelectorAll('text')].map((t) => t.textContent.trim()),
  })));
  check(nodes.length === tp.nodes, `tape: ${tp.nodes} g.node (tg_tape_dot's nodes)`,
    `found ${nodes.length}`);
  const entries = nodes.filter((n) => n.texts.some((t) => /^#\d+ /.test(t)));
  check(entries.length === tp.entries, `tape: ${tp.entries} entries (tg_tape_print's lines)`,
    `found ${entries.length}`);
  for (const name of tp.names) {
    const has = nodes.some((n) => n.texts.some((t) => t === name || t.startsWith(`${name} (`)));
    check(has, `tape: a node named ${name}`);
  }
  const zn = nodes.find((n) => n.texts.some((t) => t.startsWith(`${tp.zeros_of} (`)));
  const zall = zn ? `${zn.title} ${zn.tip} ${zn.texts.join(' ')}` : '';
  check(zall.includes(tp.zeros), `tape: ${tp.zeros_of}'s gradient shows "${tp.zeros}"`,
    zn ? `node says "${zall}"` : 'no such node');
  // each entry's tooltip: op, output name and shape, |grad| as tg_tape_print
  // prints it (at the digits shown), call site
  for (const line of tp.printed.split('\n').filter((l) => l.startsWith('#'))) {
    const m = line.match(/^#(\d+) (\w+)\(.*\) -> (.*?)\s*(\([\d,]*\))\s+\|grad\| = (\S+)(?:\s+(zeros \d+\/\d+))?\s+at (\S+)$/);
    if (!m) {
      check(false, `tape: tg_tape_print's line "${line}" parsed`);
      continue;
    }
    const [, n, op, name, shape, g, zeros, site] = m;
    const node = nodes.find((x) => x.title.startsWith(`#${n} ${op}`));
    const tip = node ? `${node.title}\n${node.tip}` : '';
    const shown = tip.match(/\|grad\|\s*=?\s*([0-9.]+(e[-+]?\d+)?)/);
    check(node && tip.includes(`${name ? `${name} ` : ''}${shape}`) && tip.includes(site) &&
      shown && asPrinted(Number(g), shown[1]) && (!zeros || tip.includes(zeros)),
      `tape: #${n}'s tooltip: ${op}, ${name || '(unnamed)'} ${shape}, |grad| ${g}, ` +
      `${zeros ? `${zeros}, ` : ''}${site}`,
      JSON.stringify(tip));
  }

  finish();
  await page.close();
}

// ---- without gnuplot and Graphviz ----------------------------------------

// The same known page written with neither gnuplot nor dot on PATH: it opens
// clean, the heatmap, chart and tape say what is missing and how to
// install it, and the lesson's figures (our own script) still work.
async function missingPage(browser, dir, ex) {
  const { page, finish } = await open(browser, join(dir, ex.page), 'missing');
  const sections = await checkCanvases(page, 'missing');
  for (const [kind, tool] of [['heatmap', /gnuplot/], ['lines', /gnuplot/], ['tape', /graphviz|dot/i]]) {
    const s = sections.find((x) => x.kind === kind);
    const say = s && await page.$eval(`#${s.id} .tg-missing`, (e) => e.textContent).catch(() => null);
    check(say && tool.test(say) && /install/.test(say),
      `missing: the ${kind} says what is missing and how to install it`, `"${say}"`);
  }
  const at = ex.attention, t = at.temperatures.find((x) => x.temperature === at.initial);
  const w = await page.evaluate((id) => window.tgReport.weights(id), at.id);
  const worst = Math.max(...t.weights.flatMap((r, i) => r.map((v, j) => (v === null ? 0 : Math.abs(w[i][j] - v)))));
  check(worst <= 1e-12, `missing: the attention figure still works (weights within ${worst.toExponential(1)})`);
  finish();
  await page.close();
}

// ---- the big page ---------------------------------------------------------

async function bigPage(browser, dir, ex) {
  const file = join(dir, ex.big.page);
  const size = statSync(file).size;
  check(size < BIG_PAGE_BOUND, `big: the page is ${(size / 1024).toFixed(0)} KB ` +
    `(< ${BIG_PAGE_BOUND >> 20} MB) for ${ex.big.rows} x ${ex.big.cols}`);
  const { page, finish } = await open(browser, file, 'big');
  await checkCanvases(page, 'big');
  const note = await page.$eval(`#${ex.big.id} p.tg-note`, (e) => e.textContent).catch(() => null);
  // "from what size to what": the full size, and a smaller one of at most 256
  const sizes = note ? (note.match(/\d+/g) || []).map(Number) : [];
  check(sizes.includes(ex.big.rows) && sizes.some((n) => n > 1 && n <= 256),
    `big: a tg-note says from ${ex.big.rows} x ${ex.big.cols} to at most 256`, `"${note}"`);
  // the readout names the block, k x k from the corner, and its mean (in
  // float32: to 1e-6)
  const got = await hoverCell(page, ex.big.id, 0, 0);
  const m = got && got.match(/rows 0-(\d+), cols 0-(\d+)\D.*: (\S+)$/);
  const k = m && Number(m[1]) + 1, mean = m && ex.big.corner_means[k];
  check(m && m[1] === m[2] && mean != null && Math.abs(Number(m[3]) - mean) <= 1e-6 * Math.abs(mean),
    `big: hover block (0,0) names rows 0-${k - 1}, cols 0-${k - 1} and their mean ${mean}`,
    `got "${got}"`);
  finish();
  await page.close();
}

// ---- the examples' pages --------------------------------------------------

// The numbers of a text, in order: "  16   0.370  0.743" -> [16, 0.37, 0.743].
const numbersOf = (t) => (t.match(/-?\d+(\.\d+)?(e[-+]?\d+)?/gi) || []).map(Number);
// a equals the printed p at the digits p was printed with
function asPrinted(a, p) {
  const frac = (p.split('e')[0].split('.')[1] || '').length;
  const exp = Number(p.split('e')[1] || 0);
  return Math.abs(a - Number(p)) <= 0.5 * 10 ** (exp - frac) * (1 + 1e-9);
}
const sectionsOf = (page) => page.$$eval('section.tg-section', (ss) => ss.map((s) => ({
  id: s.id, kind: s.dataset.kind, title: (s.querySelector('h2') || {}).textContent || '',
  text: s.textContent,
})));

async function trainHead(page, out, sections) {
  const T = Number((out.match(/task: (\d+) tokens/) || [])[1]);
  const heat = sections.filter((s) => s.kind === 'heatmap');
  for (const [when, re, sec] of [
    ['untrained', /untrained: it attends most to position (\d+) \(weight (\S+)\)/, /before|untrained/i],
    ['trained', /\n\s*trained: +it attends most to position (\d+) \(weight (\S+)\)/, /after|(^|[^n])trained/i],
  ]) {
    const m = out.match(re);
    const s = heat.find((h) => sec.test(h.title));
    if (!check(m && s, `train_head: the ${when} attention heatmap and its printed weight`,
      `printed: ${!!m}, heatmaps: ${heat.map((h) => h.title).join(' | ')}`)) continue;
    const got = await hoverCell(page, s.id, T - 1, Number(m[1]));
    const v = got && got.slice(got.lastIndexOf(': ') + 2);
    check(v && asPrinted(Number(v), m[2]),
      `train_head: hover the query's row ${T - 1}, col ${m[1]} of "${s.title}" reads the printed ${m[2]}`,
      `got "${got}"`);
  }
  // the lesson's attention figure of the trained head's scores, at its
  // initial temperature (1: the head's own softmax)
  const trained = out.match(/\n\s*trained: +it attends most to position (\d+) \(weight (\S+)\)/);
  const att = sections.find((s) => s.kind === 'attention');
  if (check(trained && att, 'train_head: an attention figure of the trained head')) {
    const got = await hoverCell(page, att.id, T - 1, Number(trained[1]));
    const v = got && got.slice(got.lastIndexOf(': ') + 2);
    check(v && asPrinted(Number(v), trained[2]),
      `train_head: its slider figure's row ${T - 1}, col ${trained[1]} reads the printed ${trained[2]}`,
      `got "${got}"`);
  }
  const loss = out.match(/loss (\S+) at step 0 ->/);
  const lines = sections.find((s) => s.kind === 'lines');
  if (check(loss && lines, 'train_head: a loss chart and the printed first loss')) {
    const xy = await page.evaluate((id) => window.tgReport.pointCenter(id, 0, 0), lines.id);
    await mouseTo(page, xy);
    const got = await readout(page, lines.id);
    const y = got && got.match(/y = (\S+)$/);
    check(y && asPrinted(Number(y[1]), loss[1]),
      `train_head: hover the loss curve's first point reads the printed ${loss[1]}`, `got "${got}"`);
  }
}

async function unscaled(page, out, sections) {
  // the table's hs = 256 row, printed and in a table or pre section
  const row = out.split('\n').find((l) => /^\s+256\s+\d\.\d+\s+\d\.\d+/.test(l));
  const want = row ? numbersOf(row) : [];
  const has = sections.some((s) => ['pre', 'table'].includes(s.kind) &&
    numbersOf(s.text).join(' ').includes(want.join(' ')));
  check(want.length > 4 && has, `unscaled: the page holds the printed row "${row && row.trim()}"`);
}

async function backpropTour(page, out, sections) {
  const printed = [...out.matchAll(/^#(\d+) (\w+)\(.*\|grad\| = (\S+)(?:\s+(zeros \d+\/\d+))?/gm)];
  const tape = sections.find((s) => s.kind === 'tape');
  if (!check(tape && printed.length, 'backprop_tour: a tape section and the printed tape')) return;
  const nodes = await page.$$eval(`#${tape.id} svg g.node`, (gs) => gs.map((g) =>
    [...g.querySelectorAll('title, text')].map((t) => t.textContent).join('\n') + '\n' +
    [...g.querySelectorAll('a')].map((a) => a.getAttribute('xlink:title') || '').join('\n')));
  for (const [, n, op, g, zeros] of printed) {
    const node = nodes.find((t) => new RegExp(`#${n} ${op}\\b`).test(t));
    const shown = node && node.match(/\|g(rad)?\|\s*=?\s*([0-9.]+(e[-+]?\d+)?)/);
    check(shown && asPrinted(Number(g), shown[2]) && (!zeros || node.includes(zeros)),
      `backprop_tour: entry #${n} ${op} shows |grad| ${g}${zeros ? `, ${zeros}` : ''} as printed`,
      node ? `node says ${JSON.stringify(node)}` : 'no node');
  }
  const masked = out.match(/masked entries: (\d+)/);
  const node = nodes.find((t) => /#\d+ masked_fill\b/.test(t));
  const z = node && node.match(/zeros (\d+)\/(\d+)/);
  check(masked && z && Number(z[1]) >= Number(masked[1]),
    `backprop_tour: masked_fill's gradient shows its exact zeros (at least the ` +
    `${masked && masked[1]} masked entries)`, node ? JSON.stringify(node) : 'no node');
}

// The rows of a table section, each its cells' text.
const rowsOf = (page, id) => page.$$eval(`#${id} tr`, (trs) =>
  trs.map((tr) => [...tr.children].map((td) => td.textContent.trim())));

// my_softmax's page: the check's figures as printed, the masked cells of
// dL/dscores drawn masked (exactly 0, as they must be), and the float32
// table's worst entries where the printed table has them.
async function mySoftmax(page, out, sections) {
  const pass = out.match(/^PASS: (\d+) elements checked, max abs err (\S+), max rel err (\S+)$/m);
  const tables = sections.filter((s) => s.kind === 'table');
  let figures = null;
  for (const t of tables) {
    const rows = await rowsOf(page, t.id);
    if (rows.some((r) => r[0] === 'result')) figures = Object.fromEntries(rows);
  }
  check(pass && figures && figures.result === 'PASS' && figures['elements checked'] === pass[1] &&
    figures['max abs err'] === pass[2] && figures['max rel err'] === pass[3],
    `my_softmax: the check's table reads the printed PASS, ${pass && pass[1]} elements, ` +
    `max abs err ${pass && pass[2]}`, JSON.stringify(figures));
  const heat = sections.find((s) => s.kind === 'heatmap');
  if (check(heat, 'my_softmax: a heatmap of dL/dscores')) {
    const got = await hoverCell(page, heat.id, 0, 7);
    check(got && /masked$/.test(got), 'my_softmax: its masked cell (0, 7) reads "masked"', `got "${got}"`);
  }
  const prec = tables.find((s) => /precision/.test(s.title));
  const rows = prec ? await rowsOf(page, prec.id) : [];
  for (const [what, re, col] of [['value', /^ +(\d+) +(\w+) .*<- value loses most here$/m, 6],
    ['gradient', /^ +(\d+) +(\w+) .*<- gradient loses most here$/m, 8]]) {
    const m = out.match(re);
    const row = m && rows.find((r) => r[0] === m[1]);
    check(row && row[1] === m[2] && row[col].endsWith('(worst)'),
      `my_softmax: the float32 table marks #${m && m[1]} ${m && m[2]} worst for the ${what}, as printed`,
      JSON.stringify(row));
  }
}

// my_softmax --bug no-mask: the wrong entry's table as printed, and the
// masked cell it names, coloured in the heatmap with the printed value.
async function mySoftmaxNoMask(page, out, sections) {
  const printed = Object.fromEntries([...out.matchAll(/^ {2}(op|call site|element|masked) +(.*)$/gm)]
    .map((m) => [m[1], m[2]]));
  let entry = null;
  for (const t of sections.filter((s) => s.kind === 'table')) {
    const rows = await rowsOf(page, t.id);
    if (rows.some((r) => r[0] === 'call site')) entry = Object.fromEntries(rows);
  }
  check(entry && printed.op === 'my_softmax (output attn)' &&
    ['op', 'call site', 'element', 'masked'].every((f) => entry[f] === printed[f]) &&
    /my_softmax\.c:\d+$/.test(entry['call site']) && entry.masked.startsWith('yes'),
    `my_softmax --bug no-mask: the entry's table reads the printed op, call site ` +
    `${printed['call site']}, element and masked`, JSON.stringify(entry));
  const cell = out.match(/at \[(\d+), (\d+)\], the wrong entry's element \(masked\): (\S+)/);
  const heat = sections.find((s) => s.kind === 'heatmap');
  if (check(cell && heat, 'my_softmax --bug no-mask: a heatmap and the printed masked cell')) {
    const got = await hoverCell(page, heat.id, Number(cell[1]), Number(cell[2]));
    const v = got && got.slice(got.lastIndexOf(': ') + 2);
    check(v && asPrinted(Number(v), cell[3]),
      `my_softmax --bug no-mask: hover the masked cell (${cell[1]}, ${cell[2]}) reads its ` +
      `gradient ${cell[3]}, not "masked"`, `got "${got}"`);
  }
}

// Each example's page (DIR/NAME.html) and what it printed (DIR/NAME.out).
async function examplePages(browser, dir) {
  for (const [name, specific] of [['train_head', trainHead], ['unscaled', unscaled],
    ['backprop_tour', backpropTour], ['my_softmax', mySoftmax],
    ['my_softmax_no-mask', mySoftmaxNoMask]]) {
    const file = join(dir, `${name}.html`);
    let out;
    try {
      out = readFileSync(join(dir, `${name}.out`), 'utf8');
      statSync(file);
    } catch (e) {
      check(false, `${name}: its page and printed output`, e.message);
      continue;
    }
    check(out.includes(`page: ${file}\n`), `${name}: prints "page: ${file}"`);
    const { page, finish } = await open(browser, file, name);
    const sections = await checkCanvases(page, name);
    const kinds = [...new Set(sections.map((s) => s.kind))].join(', ');
    check(sections.length > 0, `${name}: ${sections.length} sections (${kinds}), ` +
      `${(statSync(file).size / 1024).toFixed(0)} KB`);
    for (const s of sections.filter((x) => x.kind === 'attention')) {
      const w = await page.evaluate((id) => window.tgReport.weights(id), s.id);
      const worst = Math.max(...w.map((r) => Math.abs(r.reduce((a, x) => a + (x || 0), 0) - 1)));
      check(worst <= 1e-12, `${name} ${s.id}: every row of weights(id) sums to 1`, `${worst}`);
    }
    await specific(page, out, await sectionsOf(page));
    finish();
    await page.close();
  }
}

// ---- main -----------------------------------------------------------------

const [dir, examples] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const ex = JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8'));
  await knownPage(browser, dir, ex);
  await bigPage(browser, dir, ex);
  const missing = join(dir, 'missing');
  await missingPage(browser, missing, JSON.parse(readFileSync(join(missing, 'expected.json'), 'utf8')));
  if (examples === '--examples') await examplePages(browser, dir);
} catch (e) {
  check(false, 'the test ran to its end', e.stack);
} finally {
  await browser.close();
}
console.log(`# ${failures} failed, ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
