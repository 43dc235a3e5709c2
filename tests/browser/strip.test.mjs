// lesson05's page in a real, headless Chromium: the forward strip, the
// token-4 bars and the averaging figure against the numbers the lesson
// prints (tests/browser.test runs this).
//
//     node strip.test.mjs DIR SRCDIR
//
// DIR holds lesson05.html, lesson05.out and lesson05.err (examples/lesson05
// --html run by tests/browser.test); SRCDIR is the source tree. The lesson's
// numbers are read at test time from its text, SRCDIR/../shared/lesson/
// 05_attention.txt, or, where the lesson is not beside the project, from
// SRCDIR/tests/lesson05.expected (which tests/lesson05.test holds equal to
// it): the averaging weights np.round(wei, 2), token 4's scaled scores
// np.round(raw, 2), its masked scores and np.round(w, 3). Each check prints
// "ok - ..." or "FAIL - ..."; the exit status is 1 when any failed.
import { chromium } from 'playwright-core';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { decodePng } from './png.mjs';

let failures = 0;
function check(ok, what, detail) {
  if (!ok) failures++;
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${ok || detail === undefined ? '' : `: ${detail}`}`);
  return ok;
}

// ---- the lesson's numbers -------------------------------------------------

// A printed numpy vector "[ 0.31  0.08 -inf ...]" as numbers (-inf kept).
const vector = (s) => s.trim().split(/\s+/).map((w) => (w === '-inf' ? -Infinity : Number(w)));
function lessonNumbers(srcdir) {
  const beside = join(srcdir, '..', 'shared', 'lesson', '05_attention.txt');
  const file = existsSync(beside) ? beside : join(srcdir, 'tests', 'lesson05.expected');
  const text = readFileSync(file, 'utf8').replace(/\s+/g, ' ');
  const wei = text.match(/mixes the past\): \[\[(.*?)\]\]/);
  const row = (label) => {
    const m = text.match(new RegExp(`${label} *: \\[([^\\]]*)\\]`));
    return m ? vector(m[1]) : null;
  };
  return {
    file,
    wei: wei ? wei[1].split(/\] \[/).map(vector) : null,
    raw: row('raw scores q\\.k/sqrt\\(hs\\)'),
    masked: row('after causal mask'),
    w: row('after softmax \\(weights\\)'),
    t: Number((text.match(/token t=(\d+):/) || [])[1]),
  };
}

// ---- the recomputation ----------------------------------------------------

// softmax over each row of scores / (root * t), the future (j > i) excluded
function weightsOf(scores, T, root, t) {
  const w = [];
  for (let i = 0; i < T; i++) {
    const x = scores.slice(i * T, i * T + i + 1).map((s) => s / root / t);
    const m = Math.max(...x), e = x.map((v) => Math.exp(v - m));
    const sum = e.reduce((a, b) => a + b, 0);
    for (let j = 0; j < T; j++) w.push(j <= i ? e[j] / sum : 0);
  }
  return w;
}
const maxDiff = (a, b) => Math.max(...a.map((x, k) => Math.abs(x - b[k])));

// ---- screenshots ----------------------------------------------------------

// The share of a PNG's pixels that differ from its most common colour.
function inkShare(buf) {
  const { width, height, rgba } = decodePng(buf);
  const count = new Map();
  for (let i = 0; i < width * height; i++) {
    const key = rgba.readUIntBE(4 * i, 3);
    count.set(key, (count.get(key) || 0) + 1);
  }
  return 1 - Math.max(...count.values()) / (width * height);
}

// ---- the page ---------------------------------------------------------------

// In the page: is every pixel of the box (x, y, w, h) of canvas id grey
// (r = g = b, as the hatched masked cells are), and how many are there?
function boxIsGrey([canvasId, b]) {
  const c = document.getElementById(canvasId);
  const d = c.getContext('2d').getImageData(Math.ceil(b.x) + 1, Math.ceil(b.y) + 1,
    Math.floor(b.w) - 2, Math.floor(b.h) - 2).data;
  for (let k = 0; k < d.length; k += 4)
    if (Math.abs(d[k] - d[k + 1]) > 2 || Math.abs(d[k + 1] - d[k + 2]) > 2) return false;
  return d.length > 0;
}

async function stripChecks(page, L) {
  const id = await page.$eval('section[data-kind="strip"]', (s) => s.id);
  const S = (fn, ...args) => page.evaluate(([i, f, a]) => window.tgStrip.figs[i][f](...a), [id, fn, args]);
  const T = 8, t = L.t;
  check(await S('stage') === 0, 'strip: starts at stage 1 (averaging)');
  // play through every stage
  await page.click(`#${id} .tg-strip-play`);
  await page.waitForFunction((i) => window.tgStrip.figs[i].stage() === 5, id, { timeout: 15000 })
    .catch(() => {});
  const visited = await page.evaluate((i) => window.tgStrip.figs[i].visited.slice().sort(), id);
  check(visited.join() === '0,1,2,3,4,5', 'strip: play walks every stage, averaging to out', visited.join());
  await page.waitForTimeout(1200);
  check(await page.$eval(`#${id} .tg-strip-play`, (b) => b.textContent.includes('play')) &&
    await S('stage') === 5, 'strip: play stops at the last stage, out');
  const where = await page.$eval(`#${id} .tg-strip-where`, (e) => e.textContent);
  check(where === 'stage 6 of 6: out', 'strip: says where it stands', where);
  await page.click(`#${id} .tg-strip-back`);
  const back = await S('stage');
  await page.click(`#${id} .tg-strip-step`);
  check(back === 4 && await S('stage') === 5, 'strip: back and step move one stage');
  const ahead = await page.$$eval(`#${id} .tg-strip-panel`, (ps) => ps.map((p) => p.className));
  check(ahead.every((c) => !c.includes('tg-strip-ahead')), 'strip: at the end no stage is dimmed');

  // the averaging stage: np.round(wei, 2), the future masked
  const bad = [];
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const got = await S('cellText', 0, i, j);
      const want = j > i ? 'masked' : L.wei[i][j].toFixed(2);
      if (got !== want) bad.push(`(${i},${j}) ${got} not ${want}`);
    }
  check(L.wei && bad.length === 0, "strip: the averaging stage is the lesson's np.round(wei, 2), " +
    'the future masked (row 7: 0.12)', bad.join('; '));
  // token t's row through scores, scaled, masked, softmax
  const row = async (s) => Promise.all([...Array(T).keys()].map((j) => S('cellText', s, t, j)));
  const scaled = await row(2), masked = await row(3), soft = await row(4);
  const scores = await Promise.all([...Array(T).keys()].map((j) => S('value', 1, t, j)));
  check(scaled.every((x, j) => x === L.raw[j].toFixed(2)),
    `strip: scaled row ${t} is the lesson's raw scores q.k/sqrt(hs)`, `${scaled} vs ${L.raw}`);
  check(scores.every((x, j) => Number((x / 4).toFixed(2)) === L.raw[j]),
    `strip: scores row ${t} / sqrt(16) rounds to the lesson's`, `${scores}`);
  check(masked.every((x, j) => (L.masked[j] === -Infinity ? x === 'masked' : x === L.masked[j].toFixed(2))),
    `strip: masked row ${t} is the lesson's, -inf drawn as masked`, `${masked} vs ${L.masked}`);
  check(soft.every((x, j) => (j > t ? x === 'masked' : x === L.w[j].toFixed(3))),
    `strip: softmax row ${t} is the lesson's np.round(w, 3), the future masked`, `${soft} vs ${L.w}`);
  const bars = await S('bars');
  check(await S('row') === t && bars.every((b, j) => (j > t ? b.masked && b.text === 'masked' :
    !b.masked && b.text === L.w[j].toFixed(3))),
  `strip: the bar chart is token ${t}'s weights as the lesson prints them`, JSON.stringify(bars));
  // a click on the softmax stage's caption goes there; the followed row's
  // line reads as the lesson prints w
  await page.click(`#${id} .tg-strip-panel[data-stage="4"] figcaption`);
  const line = await S('rowLine');
  const want = `softmax, row ${t} (${t}): [` + [...Array(T).keys()].map((j) =>
    (j > t ? 'masked' : L.w[j].toFixed(3))).join('  ') + ']  sum = 1.000';
  check(await S('stage') === 4 && line === want,
    "strip: a click on a stage goes there; its row line is the lesson's weights", line);
  // masked cells drawn hatched grey, not as a colour of the scale
  for (const [s, name] of [[0, 'averaging'], [3, 'masked'], [4, 'softmax']]) {
    const box = await S('cellBox', s, 2, T - 1);
    check(await page.evaluate(boxIsGrey, [`tg${id.replace('-', '')}-${name}`, box]),
      `strip: the ${name} stage draws its masked cell (2, ${T - 1}) grey`);
  }
  // the data: the page's weights and out against a recomputation
  const data = await page.$eval(`#${id} script.tg-data`, (e) => JSON.parse(e.textContent));
  let w = await S('weights');
  check(maxDiff(w, weightsOf(data.scores, T, 4, 1)) <= 1e-12,
    'strip: weights = softmax(masked(scores / sqrt(16)))');
  const out = [];
  for (let i = 0; i < T; i++)
    for (let c = 0; c < data.dv; c++) {
      let s = 0;
      for (let j = 0; j < T; j++) s += w[i * T + j] * data.v[j * data.dv + c];
      out.push(s);
    }
  const pageOut = [];
  for (let i = 0; i < T; i++)
    for (let c = 0; c < data.dv; c++) pageOut.push(await S('value', 5, i, c));
  check(maxDiff(out, pageOut) <= 1e-12, 'strip: out = weights @ v');
  return { id, S, data };
}

// The sqrt(hs) switch and the temperature slider: softmax(scores / t).
async function controlChecks(page, L, { id, S, data }) {
  const T = 8;
  const setTemp = (v) => page.$eval(`#${id} .tg-temperature`, (el, x) => {
    el.value = String(x);
    el.dispatchEvent(new Event('input'));
  }, v);
  const before = await S('weights');
  await page.click(`#${id} .tg-strip-sqrt`);
  let w = await S('weights');
  check(maxDiff(w, weightsOf(data.scores, T, 1, 1)) <= 1e-12 && maxDiff(w, before) > 0.01,
    'strip: sqrt(hs) off: weights = softmax(masked(scores)), changed');
  const peak = (x) => Math.max(...x.slice(L.t * T, L.t * T + T));
  check(peak(w) > peak(before), 'strip: sqrt(hs) off: token 4 attends more peakily',
    `${peak(w)} vs ${peak(before)}`);
  for (const [root, t] of [[1, 0.5], [4, 2], [4, 0.25]]) {
    if ((root === 4) !== await page.$eval(`#${id} .tg-strip-sqrt`, (e) => e.checked))
      await page.click(`#${id} .tg-strip-sqrt`);
    await setTemp(t);
    w = await S('weights');
    check(maxDiff(w, weightsOf(data.scores, T, root, t)) <= 1e-12,
      `strip: sqrt(hs) ${root === 4 ? 'on' : 'off'}, t = ${t}: weights = softmax(scores / ${root * t})`);
  }
  const shown = await page.$eval(`#${id} .tg-temperature-value`, (e) => e.textContent);
  check(shown === '0.25', 'strip: the slider shows its temperature', shown);
  const bars = await S('bars');
  check(bars.every((b, j) => b.masked === j > L.t &&
    (b.masked || Math.abs(b.value - w[L.t * T + j]) === 0)), 'strip: the bars follow the slider');
  await setTemp(1);
  // a click on row 6 of the masked stage goes there and follows row 6;
  // the arrow keys step
  const box = await S('cellBox', 3, 6, 2);
  const at = await page.evaluate(([c, b]) => {
    const e = document.getElementById(c);
    e.scrollIntoView({ block: 'center' });
    const q = e.getBoundingClientRect();
    return { x: q.left + (b.x + b.w / 2) * q.width / e.width,
      y: q.top + (b.y + b.h / 2) * q.height / e.height };
  }, [`tg${id.replace('-', '')}-masked`, box]);
  await page.mouse.click(at.x, at.y);
  const line = await S('rowLine'), bars6 = await S('bars');
  check(await S('stage') === 3 && await S('row') === 6 && line.startsWith('masked, row 6 (6): [') &&
    bars6.filter((b) => b.masked).length === 1, 'strip: a click on row 6 of a stage goes there ' +
    'and follows row 6 (one masked bar)', line);
  await page.keyboard.press('ArrowRight');
  const right = await S('stage');
  await page.keyboard.press('ArrowLeft');
  await page.keyboard.press('ArrowLeft');
  check(right === 4 && await S('stage') === 2, 'strip: the arrow keys step');
  const soft = await Promise.all([...Array(T).keys()].map((j) => S('cellText', 4, L.t, j)));
  check(soft.slice(0, L.t + 1).every((x, j) => x === L.w[j].toFixed(3)),
    "strip: back at t = 1 with sqrt(hs), the lesson's weights again");
}

// The averaging figure (plot/report.js): masked future, np.round's 0.12.
async function averagingChecks(page, L) {
  const id = await page.$eval('section[data-kind="averaging"]', (s) => s.id);
  const bad = [];
  for (let i = 0; i < 8; i++)
    for (let j = 0; j < 8; j++) {
      const got = await page.evaluate(([f, a, b]) => window.tgReport.cellText(f, a, b), [id, i, j]);
      const want = j > i ? 'masked' : L.wei[i][j].toFixed(2);
      if (got !== want) bad.push(`(${i},${j}) ${got} not ${want}`);
    }
  check(bad.length === 0, "averaging figure: every cell as the lesson's np.round(wei, 2), " +
    'the future masked, row 7 0.12', bad.join('; '));
  const grey = await page.evaluate((f) => {
    const p = window.tgReport.cellCenter(f, 2, 6);
    const c = document.querySelector(`#${f} canvas`), r = c.getBoundingClientRect();
    const x = (p.x - r.left) * c.width / r.width, y = (p.y - r.top) * c.height / r.height;
    return [...c.getContext('2d').getImageData(Math.round(x), Math.round(y), 1, 1).data];
  }, id);
  check(grey[0] === grey[1] && grey[1] === grey[2], 'averaging figure: a future cell is drawn grey',
    grey.join());
  const att = await page.$eval('section[data-kind="attention"]', (s) => s.id);
  const w = await page.evaluate((f) => window.tgReport.weights(f), att);
  check(w[L.t].slice(0, L.t + 1).every((x, j) => x.toFixed(3) === L.w[j].toFixed(3)),
    `attention figure: row ${L.t} is the lesson's weights`, `${w[L.t]}`);
}

// ---- main -----------------------------------------------------------------

const [dir, srcdir] = process.argv.slice(2);
const L = lessonNumbers(srcdir);
check(L.wei && L.wei.length === 8 && L.raw && L.masked && L.w && L.t === 4,
  `the lesson's numbers read from ${L.file}`);
const printed = readFileSync(join(dir, 'lesson05.out'), 'utf8');
check(printed === readFileSync(join(srcdir, 'tests', 'lesson05.expected'), 'utf8'),
  'lesson05 --html prints what the lesson prints, unchanged');
const file = join(dir, 'lesson05.html');
check(readFileSync(join(dir, 'lesson05.err'), 'utf8') === `page: ${file}\n`,
  'lesson05 --html says "page: FILE" on stderr');

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(pathToFileURL(resolve(file)).href);
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready &&
    window.tgStrip && window.tgStrip.ready, null, { timeout: 10000 });
  const found = await stripChecks(page, L);
  await controlChecks(page, L, found);
  await averagingChecks(page, L);
  for (const width of [390, 1366, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    await page.waitForTimeout(200);
    const all = inkShare(await page.screenshot({ fullPage: true }));
    const strip = inkShare(await page.locator('section[data-kind="strip"]').screenshot());
    const overflow = await page.evaluate(() => Math.max(...[...document.querySelectorAll(
      'section[data-kind="strip"] *')].map((e) => e.getBoundingClientRect().right)) -
      document.documentElement.clientWidth);
    check(all > 0.05 && strip > 0.05 && overflow <= 0,
      `screenshots at width ${width}: page and strip drawn (${(100 * all).toFixed(1)}%, ` +
      `${(100 * strip).toFixed(1)}% inked), the strip no wider than the screen`, `overflow ${overflow}`);
  }
  check(errors.length === 0, 'lesson05 page: no console or page errors', errors.join(' | '));
  // backprop_tour's page is the lesson's head too (the same draws): one page
  // that walks it forward (this strip, the lesson's numbers) then backward.
  const tour = join(dir, 'backprop_tour.html');
  await page.setViewportSize({ width: 1366, height: 900 });
  await page.goto(pathToFileURL(resolve(tour)).href);
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready &&
    window.tgStrip && window.tgStrip.ready, null, { timeout: 10000 });
  await stripChecks(page, L);
  check(await page.evaluate(() => {
    const s = document.querySelector('section[data-kind="strip"]');
    const b = document.querySelector('section[data-kind="backward"]');
    return !!(s && b && (s.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING));
  }), 'backprop_tour page: the forward strip, then the backward stepper');
  check(errors.length === 0, 'backprop_tour page: no console or page errors', errors.join(' | '));
} catch (e) {
  check(false, 'the test ran to its end', e.stack);
} finally {
  await browser.close();
}
console.log(`# ${failures} failed`);
process.exit(failures ? 1 : 0);
