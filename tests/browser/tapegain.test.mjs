// The tape picture and the softmax gain in a real, headless Chromium
// (playwright-core driving Debian's /usr/bin/chromium; tests/browser.test
// runs this after the examples wrote their pages).
//
//     node tapegain.test.mjs DIR
//
// DIR holds train_head.html and unscaled.html with what the programs
// printed (train_head.out, unscaled.out). Checked:
//   - train_head's attention figure: only the last row, the one the loss
//     reads, has a softmax gain, and its curve is drawn;
//   - train_head's tape (taken at step 0): every leaf that requires grad
//     shows the gradient it received (|grad| > 0), x shows none (a
//     constant), the mask is a node of its own drawn into masked_fill, the
//     legend is there, and the caption's zero counts are the ones the
//     program printed (which it checked against the tape);
//   - unscaled's attention figures: the hovered row's softmax gain at the
//     page's temperature equals the program's table for that row (scaled
//     and unscaled), at temperature sqrt(hs) the unscaled figure's equals
//     the scaled one's, the gain curve is drawn for the hovered row with
//     the temperature marked, and the rows where the unscaled gain is below
//     the scaled one are as many as the title and the program say;
//   - no console error, and non-blank screenshots at 390, 1366 and 1920
//     pixels wide.
// Each check prints "ok - ..." or "FAIL - ..."; the exit status is 1 when
// any failed.
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { decodePng } from './png.mjs';

let failures = 0;
function check(ok, what, detail) {
  if (!ok) failures++;
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${ok || !detail ? '' : `: ${detail}`}`);
  return ok;
}


// The share of pixels off the most common colour, and the colours' count.
function inked(png) {
  const { width, height, rgba } = decodePng(png);
  const count = new Map();
  for (let i = 0; i < width * height; i++) {
    const key = rgba.readUInt32BE(i * 4);
    count.set(key, (count.get(key) || 0) + 1);
  }
  return { share: 1 - Math.max(...count.values()) / (width * height), colours: count.size };
}

async function open(browser, file, name) {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  await page.goto(pathToFileURL(resolve(file)).href, { waitUntil: 'load' });
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready === true,
    null, { timeout: 10000 }).catch(() => check(false, `${name}: window.tgReport.ready`));
  return { page, errors };
}

// Screenshots of the sections at the three widths: each shows something.
async function screenshots(page, name, selectors) {
  for (const width of [390, 1366, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    for (const sel of selectors) {
      const el = await page.$(sel);
      if (!check(el !== null, `${name} ${width}px: ${sel} is there`)) continue;
      await el.scrollIntoViewIfNeeded();
      const ink = inked(await el.screenshot());
      const box = await el.boundingBox();
      check(ink.share > 0.01 && ink.colours >= 3 && box.x >= 0 && box.x + box.width <= width + 1,
        `${name} ${width}px: ${sel} drawn within the width, ${(100 * ink.share).toFixed(1)}% ` +
        `of pixels off the background, ${ink.colours} colours`,
        `box ${JSON.stringify(box)}`);
    }
  }
  await page.setViewportSize({ width: 1366, height: 900 });
}

// The JSON data of section sec.
async function dataOf(page, sec) {
  return page.$eval(`#${sec} script.tg-data`, (e) => JSON.parse(e.textContent));
}

// ---- train_head: the tape ---------------------------------------------

async function trainHead(browser, dir) {
  const out = readFileSync(join(dir, 'train_head.out'), 'utf8');
  const { page, errors } = await open(browser, join(dir, 'train_head.html'), 'train_head');
  const tape = await page.$eval('section[data-kind="tape"]', (s) => s.id).catch(() => null);
  if (!check(tape !== null, 'train_head: has a tape section')) return;
  const nodes = (await dataOf(page, tape)).nodes;
  const byName = (n) => nodes.find((x) => x.text.split('\n')[0] === n ||
    (x.id[0] === 'e' && x.text.split('\n')[1].startsWith(n + ' ')));
  for (const w of ['W_q', 'W_k', 'W_v']) {
    const leaf = byName(w);
    check(leaf && leaf.id[0] === 't' && leaf.grad > 0 && /\n\|grad\| /.test(leaf.text),
      `train_head tape: leaf ${w} shows the gradient it received (|grad| ${leaf && leaf.grad})`,
      JSON.stringify(leaf));
  }
  const x = byName('x');
  check(x && x.id[0] === 't' && x.text.includes('no grad (constant)') && !('grad' in x),
    'train_head tape: leaf x is a constant, without a gradient', JSON.stringify(x));
  const mask = nodes.find((n) => n.id[0] === 'm');
  check(mask && mask.text.startsWith('mask\n(8,8)\ntrue 28/64'),
    'train_head tape: the mask is a node of its own, 28 of 64 masked', JSON.stringify(mask));
  const svgMask = await page.$$eval(`#${tape} svg g.node title`,
    (ts) => ts.map((t) => t.textContent).filter((t) => t.startsWith('mask\n')).length);
  check(svgMask === 1, 'train_head tape: the picture draws the mask node', `${svgMask}`);
  const maskEdge = await page.$$eval(`#${tape} svg g.edge title`,
    (ts) => ts.map((t) => t.textContent));
  check(mask && maskEdge.some((t) => t.startsWith(`${mask.id}->e`)),
    'train_head tape: an edge from the mask into masked_fill', maskEdge.join(' '));
  const legend = await page.$eval(`#${tape} dl.tg-tape-legend`, (d) => d.textContent).catch(() => '');
  check(['box', 'ellipse', 'dashed ellipse', 'edge', 'double blue border'].every((w) => legend.includes(w)),
    'train_head tape: the legend names every mark', legend);
  // the caption's counts are the ones the program printed
  const row = (n) => {
    const m = out.match(new RegExp(`^  ${n}\\s+(\\d+)/(\\d+)\\s+(\\d+)\\s+(\\d+)\\s+(\\d+)\\s*$`, 'm'));
    return m ? m.slice(1).map(Number) : null;
  };
  const attn = row('attn'), scaled = row('scaled'), masked = row('masked');
  const caption = await page.$$eval('section[data-kind="text"]', (ss) => ss.map((s) => s.textContent)
    .find((t) => t.includes('what its zeros are')) || '');
  check(attn && scaled && masked &&
        caption.includes(`all ${attn[0]} zeros of attn's gradient`) &&
        caption.includes(`${scaled[2]} of the ${scaled[0]} zeros are masked positions, ${scaled[4]} the one-choice`) &&
        caption.includes(`and ${scaled[3]} rows the loss does not read`) &&
        caption.includes(`has the same ${masked[2]}, ${masked[4]} and ${masked[3]}`),
    'train_head tape: the caption says the zero counts the program printed',
    `printed attn ${attn} scaled ${scaled} masked ${masked}; caption "${caption}"`);
  check(attn && scaled && masked && [attn, scaled, masked].every((r) => r[0] === r[2] + r[3] + r[4]),
    'train_head tape: the zeros by cause sum to the tape\'s zeros');
  // the lesson's attention figure: only the row the loss reads has a gain
  const att = await page.$eval('section[data-kind="attention"]', (s) => s.id).catch(() => null);
  if (check(att !== null, 'train_head: has the attention figure')) {
    const texts = [];
    for (let r = 0; r < 8; r++) {
      const p = await page.evaluate(([i, row]) => window.tgReport.cellCenter(i, row, 0), [att, r]);
      await page.mouse.move(p.x + 1, p.y + 1);
      await page.mouse.move(p.x, p.y);
      texts.push(await page.$eval(`#${att} .tg-rowstats`, (e) => e.textContent));
    }
    const last = texts[7].match(/, gain (\S+)$/);
    check(texts.slice(0, 7).every((t) => t.endsWith('gain none (no gradient reaches this row)')) &&
          last && Number(last[1]) > 0,
      'train_head attention: rows 0-6 get no gradient from the loss, row 7 has a softmax gain',
      texts.join(' | '));
    const c = await page.evaluate((i) => window.tgReport.gainCurve(i), att);
    check(c && c.row === 7 && last && c.gain.toPrecision(6) === Number(last[1]).toPrecision(6),
      'train_head attention: the gain curve is of row 7, marked at its gain', JSON.stringify(c && c.gain));
  }
  await screenshots(page, 'train_head', [`#${tape}`]);
  check(errors.length === 0, 'train_head: no console or page errors', errors.join(' | '));
  await page.close();
}

// ---- unscaled: the gain -------------------------------------------------

// The hovered row's gain as the readout shows it (after "gain "): six
// digits, against the table's four decimals, so they agree within
// 0.5e-4 + 1e-6.
async function hoverGain(page, id, row) {
  const p = await page.evaluate(([i, r]) => window.tgReport.cellCenter(i, r, 0), [id, row]);
  await page.mouse.move(p.x + 1, p.y + 1);
  await page.mouse.move(p.x, p.y);
  const stats = await page.$eval(`#${id} .tg-rowstats`, (e) => e.textContent);
  const m = stats.match(/^entropy \S+ nats, gain (\S+)$/);
  return m ? Number(m[1]) : NaN;
}

async function setTemperature(page, id, t) {
  await page.$eval(`#${id} input.tg-temperature`, (e, v) => {
    e.value = String(v);
    e.dispatchEvent(new Event('input', { bubbles: true }));
  }, t);
}

async function unscaled(browser, dir) {
  const out = readFileSync(join(dir, 'unscaled.out'), 'utf8');
  const table = [...out.matchAll(/^\s+(\d+)\s+(\d+\.\d{4})\s+(\d+\.\d{4})$/gm)]
    .map((m) => ({ row: Number(m[1]), scaled: Number(m[2]), unscaled: Number(m[3]) }));
  const claim = out.match(/^unscaled below scaled on (\d+) of (\d+) rows$/m);
  check(table.length === 15 && claim, 'unscaled: prints the page sequence\'s gains row by row and the claim',
    `${table.length} rows, claim ${claim}`);
  const { page, errors } = await open(browser, join(dir, 'unscaled.html'), 'unscaled');
  const ids = await page.$$eval('section[data-kind="attention"]', (ss) => ss.map((s) => s.id));
  if (!check(ids.length === 2, 'unscaled: two attention figures', `${ids}`)) return;
  const [un, sc] = ids;
  const title = await page.$eval(`#${un} h2`, (h) => h.textContent).catch(() => '');
  const gains = { [un]: [], [sc]: [] };
  for (const [id, col] of [[un, 'unscaled'], [sc, 'scaled']]) {
    const temp = (await dataOf(page, id)).temp;
    let worst = 0;
    for (const t of table) {
      const g = await hoverGain(page, id, t.row);
      gains[id][t.row] = g;
      worst = Math.max(worst, Math.abs(g - t[col]));
    }
    check(worst <= 0.5e-4 + 1e-6, `unscaled ${id} (${col}): at the page's temperature ${temp} every ` +
      `row's hover gain equals the table's (max |diff| ${worst.toExponential(2)})`);
    const c = await page.evaluate((i) => window.tgReport.gainCurve(i), id);
    const last = table[table.length - 1];
    check(c && c.row === last.row && c.temp === temp && c.gain.toPrecision(6) === gains[id][last.row].toPrecision(6) &&
          c.points.length > 100 && c.points.every((q) => q[0] > 0 && q[1] >= 0 && q[1] <= 1),
      `unscaled ${id}: the gain curve is drawn for the hovered row ${last.row}, the temperature ` +
      `${temp} marked at its gain`, JSON.stringify(c && { row: c.row, temp: c.temp, gain: c.gain }));
    const ink = inked(await (await page.$(`#${id} canvas.tg-gaincurve`)).screenshot());
    check(ink.share > 0.01 && ink.colours >= 3, `unscaled ${id}: the gain curve's canvas is drawn`,
      `${ink.share}`);
  }
  const below = table.filter((t) => gains[un][t.row] < gains[sc][t.row]).length;
  check(claim && below === Number(claim[1]) && title.includes(`below the scaled one's on ${below} of 15 rows`),
    `unscaled: the unscaled gain is below the scaled one on ${below} of 15 rows, as printed and titled`,
    `title "${title}"`);
  // dividing the unscaled scores by sqrt(hs) = 16 is the scaled head
  await setTemperature(page, un, 16);
  let worst = 0;
  for (const t of table) worst = Math.max(worst, Math.abs(await hoverGain(page, un, t.row) - t.scaled));
  check(worst <= 0.5e-4 + 1e-6, 'unscaled: at temperature 16 = sqrt(256) the unscaled figure\'s gains ' +
    `are the scaled column's (max |diff| ${worst.toExponential(2)})`);
  await screenshots(page, 'unscaled', [`#${un}`, `#${sc}`]);
  check(errors.length === 0, 'unscaled: no console or page errors', errors.join(' | '));
  await page.close();
}

const [dir] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  await trainHead(browser, dir);
  await unscaled(browser, dir);
} catch (e) {
  check(false, 'the test ran to its end', e.stack);
} finally {
  await browser.close();
}
console.log(`# ${failures} failed`);
process.exit(failures ? 1 : 0);
