// Pictures that do not mislead, in a real, headless Chromium (playwright-core
// driving Debian's /usr/bin/chromium; tests/browser.test runs this).
//
//     node pictures.test.mjs DIR [--examples]
//
// DIR holds what tests/report_pages wrote: pictures.html and expected.json
// (its "pictures" part says what the page must show); with --examples also
// the example programs' pages (train_head.html, unscaled.html,
// backprop_tour.html, my_softmax.html). Checked:
//   - on pictures.html, read from screenshots: a gradient's exact zeros show
//     the diverging scale's neutral colour, hatched, where a 1e-9 shows the
//     neutral unhatched and a masked cell grey; two weight heatmaps of
//     different data show the same colour for the same weight (the unit
//     scale's fixed [0, 1]) and different colours for different weights;
//     the readout says "exactly 0";
//   - on every page, every text gnuplot draws (tick labels, axis titles,
//     the colour bar's, the key) lies inside its canvas, the axis titles
//     are drawn and overlap no other text, and a chart's key lies outside
//     its data area; the lesson's attention figure's texts inside its
//     canvas, its colour bar saying its fixed range;
//   - no console or page error; full-page screenshots non-blank at the
//     widths of a phone (390), a laptop (1366) and a projector (1920).
// Each check prints "ok - ..." or "FAIL - ..."; the exit status is 1 when
// any failed.
import { chromium } from 'playwright-core';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { decodePng } from './png.mjs';

const WIDTHS = { phone: 390, laptop: 1366, projector: 1920 };
let failures = 0;
function check(ok, what, detail) {
  if (!ok) failures++;
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${ok || !detail ? '' : `: ${detail}`}`);
  return ok;
}

// ---- screenshots ----------------------------------------------------------

const hex = (s) => [1, 3, 5].map((i) => parseInt(s.slice(i, i + 2), 16));
const near = (a, b, tol) => a.every((v, k) => Math.abs(v - b[k]) <= tol);

// The pixels of cell (row, col) of heatmap id on screen: an n x n grid over
// the middle 80% of the cell, from a screenshot of the viewport.
async function cellPixels(page, id, row, col, n = 9) {
  const at = (r, c) => page.evaluate(([i, a, b]) => window.tgReport.cellCenter(i, a, b), [id, r, c]);
  const p = await at(row, col);
  const q = await at(row + (row > 0 ? -1 : 1), col + (col > 0 ? -1 : 1));
  const w = Math.abs(q.x - p.x), h = Math.abs(q.y - p.y);
  const shot = decodePng(await page.screenshot());
  const px = [];
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) {
      const x = Math.round(p.x + (j / (n - 1) - 0.5) * 0.8 * w);
      const y = Math.round(p.y + (i / (n - 1) - 0.5) * 0.8 * h);
      const k = (y * shot.width + x) * 4;
      px.push([shot.rgba[k], shot.rgba[k + 1], shot.rgba[k + 2]]);
    }
  return px;
}
// The most common colour of pixels.
function mode(px) {
  const count = new Map();
  for (const p of px) count.set(p.join(','), (count.get(p.join(',')) || 0) + 1);
  let best = null, n = 0;
  for (const [k, v] of count) if (v > n) { best = k; n = v; }
  return best.split(',').map(Number);
}
// Hatching: some of the cell's pixels far darker than the neutral.
const strokes = (px) => px.filter((p) => Math.max(...p) < 200).length;

// ---- texts drawn on the canvases ------------------------------------------

// In the page: each gnuplot figure redrawn with its texts recorded (gnuplot.T
// and gnuplot.TR), each with its box in canvas pixels (the canvas text's own
// measure, ascent and descent; turned by its angle), the canvas size and the
// plot area gnuplot reports.
function gnuplotTexts() {
  const gp = window.gnuplot, out = [];
  if (!gp || !window.CanvasTextFunctions) return out;
  const CT = window.CanvasTextFunctions;
  for (const canvas of document.querySelectorAll('section.tg-section canvas.tg-gnuplot')) {
    if (typeof window[canvas.id] !== 'function') continue;
    const texts = [], T = gp.T, TR = gp.TR;
    const box = (x, y, angle, size, justify, s) => {
      const w = CT.measure('sans', size, s), up = CT.ascent('sans', size), down = CT.descent('sans', size);
      const x0 = justify === 'Right' ? -w : justify === 'Center' ? -w / 2 : 0;
      const a = angle * Math.PI / 180, cs = Math.cos(a), sn = Math.sin(a);
      const pts = [[x0, -up], [x0 + w, -up], [x0, down], [x0 + w, down]].map(([u, v]) =>
        [x / 10 + u * cs - v * sn, y / 10 + u * sn + v * cs]);
      texts.push({ text: s, x0: Math.min(...pts.map((p) => p[0])), x1: Math.max(...pts.map((p) => p[0])),
        y0: Math.min(...pts.map((p) => p[1])), y1: Math.max(...pts.map((p) => p[1])) });
    };
    gp.T = function (x, y, size, justify, s) { box(x, y, 0, size, justify, s); return T.apply(this, arguments); };
    gp.TR = function (x, y, angle, size, justify, s) { box(x, y, angle, size, justify, s); return TR.apply(this, arguments); };
    try { window[canvas.id](); } finally { gp.T = T; gp.TR = TR; }
    const section = canvas.closest('section');
    out.push({ id: section.id, kind: section.dataset.kind, width: canvas.width, height: canvas.height,
      area: { x0: gp.plot_xmin, x1: gp.plot_xmax, y0: gp.plot_ytop, y1: gp.plot_ybot }, texts });
  }
  return out;
}

// In the page: the lesson's attention figures redrawn (the slider's input
// at its value) with their fillText calls recorded, boxes from the
// context's own measureText, turned by the context's transform.
function lessonTexts() {
  const out = [];
  for (const section of document.querySelectorAll('section.tg-section[data-kind="attention"]')) {
    const canvas = section.querySelector('canvas'), slider = section.querySelector('.tg-temperature');
    if (!canvas || !slider) continue;
    const g = canvas.getContext('2d'), fill = g.fillText, texts = [];
    g.fillText = function (s, x, y) {
      const m = g.measureText(s), t = g.getTransform();
      const x0 = g.textAlign === 'center' ? -m.width / 2 : g.textAlign === 'right' ? -m.width : 0;
      const pts = [[x0, -m.actualBoundingBoxAscent], [x0 + m.width, -m.actualBoundingBoxAscent],
        [x0, m.actualBoundingBoxDescent], [x0 + m.width, m.actualBoundingBoxDescent]].map(([u, v]) =>
        [t.a * (x + u) + t.c * (y + v) + t.e, t.b * (x + u) + t.d * (y + v) + t.f]);
      texts.push({ text: String(s), x0: Math.min(...pts.map((p) => p[0])), x1: Math.max(...pts.map((p) => p[0])),
        y0: Math.min(...pts.map((p) => p[1])), y1: Math.max(...pts.map((p) => p[1])) });
      return fill.apply(this, arguments);
    };
    try { slider.dispatchEvent(new Event('input', { bubbles: true })); } finally { g.fillText = fill; }
    out.push({ id: section.id, width: canvas.width, height: canvas.height, texts });
  }
  return out;
}

const inside = (t, f) => t.x0 >= -0.5 && t.y0 >= -0.5 && t.x1 <= f.width + 0.5 && t.y1 <= f.height + 0.5;
const overlap = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
const show = (t) => `"${t.text}" [${[t.x0, t.y0, t.x1, t.y1].map((v) => v.toFixed(0))}]`;

// Every gnuplot and lesson figure of the page: texts inside the canvas;
// for the heatmaps, titles given drawn and clear of every other text; for
// charts, the key's labels outside the data area.
async function checkTexts(page, name, titles = {}) {
  const figs = await page.evaluate(gnuplotTexts);
  for (const f of figs) {
    const out = f.texts.filter((t) => t.text.trim() && !inside(t, f));
    check(f.texts.length > 0 && out.length === 0,
      `${name} ${f.id} (${f.kind}): all ${f.texts.length} texts inside the ${f.width}x${f.height} canvas`,
      out.map(show).join(', '));
    const want = titles[f.id] || [];
    for (const title of want) {
      const t = f.texts.find((x) => x.text === title);
      const hit = t && f.texts.find((x) => x !== t && x.text.trim() && overlap(x, t));
      check(t && !hit, `${name} ${f.id}: the title "${title}" drawn, clear of the other texts`,
        !t ? 'not drawn' : hit ? `meets ${show(hit)}` : '');
    }
    if (f.kind === 'lines' && titles[`${f.id}:key`]) {
      for (const label of titles[`${f.id}:key`]) {
        const t = f.texts.find((x) => x.text === label);
        check(t && !overlap(t, f.area), `${name} ${f.id}: the key's "${label}" outside the data area`,
          t ? `${show(t)} meets the plot [${Object.values(f.area).map((v) => v.toFixed(0))}]` : 'not drawn');
      }
    }
  }
  for (const f of await page.evaluate(lessonTexts)) {
    const out = f.texts.filter((t) => !inside(t, f));
    check(f.texts.length > 0 && out.length === 0,
      `${name} ${f.id} (attention): all ${f.texts.length} texts inside the canvas`, out.map(show).join(', '));
    check(f.texts.some((t) => /weight \(fixed 0 to 1\)/.test(t.text)) && f.texts.some((t) => t.text === '1'),
      `${name} ${f.id} (attention): its colour bar says the fixed range 0 to 1`);
  }
  return figs;
}

// ---- pages ----------------------------------------------------------------

async function open(browser, file, width) {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  await page.goto(pathToFileURL(resolve(file)).href, { waitUntil: 'load' });
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready === true, null, { timeout: 10000 })
    .catch(() => errors.push('window.tgReport.ready never set'));
  return { page, errors };
}

// The page at the three widths: no error, a non-blank full-page screenshot.
async function widths(browser, file, name) {
  for (const [what, width] of Object.entries(WIDTHS)) {
    const { page, errors } = await open(browser, file, width);
    const shot = decodePng(await page.screenshot({ fullPage: true }));
    const count = new Map();
    for (let i = 0; i < shot.width * shot.height; i++) {
      const k = shot.rgba.readUInt32BE(i * 4);
      count.set(k, (count.get(k) || 0) + 1);
    }
    const share = 1 - Math.max(...count.values()) / (shot.width * shot.height);
    check(share > 0.02 && count.size > 16,
      `${name} at ${width} px (${what}): screenshot ${shot.width}x${shot.height} non-blank, ` +
      `${(100 * share).toFixed(1)}% inked, ${count.size} colours`);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(wide <= 1, `${name} at ${width} px: nothing wider than the screen`, `${wide} px too wide`);
    check(errors.length === 0, `${name} at ${width} px: no console or page errors`, errors.join(' | '));
    await page.close();
  }
}

async function picturesPage(browser, dir, ex) {
  const file = join(dir, ex.page), G = ex.gradient, neutral = hex(ex.neutral);
  const { page, errors } = await open(browser, file, WIDTHS.laptop);
  const titles = { [G.id]: G.titles, [ex.weights[0]]: ex.titles, [ex.weights[1]]: ex.titles,
    [`${ex.lines.id}:key`]: ex.lines.labels, [ex.lines.id]: ex.lines.titles };
  await checkTexts(page, 'pictures', titles);

  for (const [r, c] of G.zeros) {
    const px = await cellPixels(page, G.id, r, c);
    const m = mode(px);
    check(near(m, neutral, 3) && strokes(px) > 0,
      `gradient: exact 0 at (${r},${c}) shows the neutral ${ex.neutral}, hatched`,
      `mode rgb(${m}), ${strokes(px)} stroke pixels`);
    const [i, cc] = [r, c];
    const p = await page.evaluate(([id, a, b]) => window.tgReport.cellCenter(id, a, b), [G.id, i, cc]);
    await page.mouse.move(p.x, p.y);
    const text = await page.$eval(`#${G.id} .tg-readout`, (e) => e.textContent);
    check(/: 0 \(exactly 0\)$/.test(text), `gradient: hover (${r},${c}) reads "0 (exactly 0)"`, `"${text}"`);
  }
  const tiny = await cellPixels(page, G.id, G.tiny[0], G.tiny[1]);
  check(near(mode(tiny), neutral, 3) && strokes(tiny) === 0,
    `gradient: 1e-9 at (${G.tiny}) is near the neutral but not hatched: told apart from an exact 0`,
    `mode rgb(${mode(tiny)}), ${strokes(tiny)} stroke pixels`);
  const [mr, mc] = G.masked[G.masked.length - 1];
  const masked = mode(await cellPixels(page, G.id, mr, mc));
  check(near(masked, [170, 170, 170], 4), `gradient: masked (${mr},${mc}) drawn grey, not as a value`,
    `rgb(${masked})`);
  const caption = await page.$eval(`#${G.id} .tg-legend`, (e) => e.textContent);
  check(caption.includes(`hatched (${G.zeros.length} cells)`) &&
    caption.includes(`masked (${G.masked.length} cells)`),
    `gradient: the caption counts ${G.zeros.length} exact zeros and ${G.masked.length} masked cells`, caption);

  const [w0, w1] = ex.weights;
  for (const [r, c] of ex.same) {
    const a = mode(await cellPixels(page, w0, r, c)), b = mode(await cellPixels(page, w1, r, c));
    check(near(a, b, 2), `weights: the same weight at (${r},${c}) is the same colour before and after`,
      `rgb(${a}) against rgb(${b})`);
  }
  for (const [r, c] of ex.differ) {
    const a = mode(await cellPixels(page, w0, r, c)), b = mode(await cellPixels(page, w1, r, c));
    check(!near(a, b, 10), `weights: different weights at (${r},${c}) are different colours`,
      `rgb(${a}) and rgb(${b})`);
  }
  check(errors.length === 0, 'pictures: no console or page errors', errors.join(' | '));
  await page.close();
  await widths(browser, file, 'pictures');
}

// An example's page: its figures' texts and keys, and the three widths.
async function examplePage(browser, dir, name) {
  const file = join(dir, `${name}.html`);
  if (!check(existsSync(file), `${name}: its page is there`)) return;
  const { page, errors } = await open(browser, file, WIDTHS.laptop);
  const figs = await page.evaluate(gnuplotTexts);
  const keys = {};
  const series = await page.$$eval('section.tg-section[data-kind="lines"] script.tg-data', (ss) =>
    ss.map((s) => [s.closest('section').id, JSON.parse(s.textContent).series.map((x) => x.label)]));
  for (const [id, labels] of series) keys[`${id}:key`] = labels.filter((l) => l);
  await checkTexts(page, name, keys);
  check(figs.length > 0, `${name}: ${figs.length} gnuplot figures checked`);
  check(errors.length === 0, `${name}: no console or page errors`, errors.join(' | '));
  await page.close();
  await widths(browser, file, name);
}

// ---- main -----------------------------------------------------------------

const [dir, examples] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const ex = JSON.parse(readFileSync(join(dir, 'expected.json'), 'utf8'));
  await picturesPage(browser, dir, ex.pictures);
  if (examples === '--examples')
    for (const name of ['train_head', 'unscaled', 'backprop_tour', 'my_softmax'])
      await examplePage(browser, dir, name);
} catch (e) {
  check(false, 'the test ran to its end', e.stack);
} finally {
  await browser.close();
}
console.log(`# ${failures} failed`);
process.exit(failures ? 1 : 0);
