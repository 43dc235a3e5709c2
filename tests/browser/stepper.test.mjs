// The backward stepper (tg_report_backward, plot/backward.js) in a real,
// headless Chromium (playwright-core driving /usr/bin/chromium;
// tests/browser.test runs this on the pages the examples wrote).
//
//     node stepper.test.mjs PAGE.html[=last] ...
//
// (=last: the page's loss reads only the last token, as train_head's)
// On each page, for each stepper: the keyboard, the buttons and the slider
// scrub every entry, the position reads "entry K of N" exactly; every
// embedded finite-difference check passes (|analytic - numeric| <= atol +
// rtol |numeric|, the page's tolerances), and a click on a checked cell of
// each input shows that check with "pass"; the exact zeros of each
// upstream gradient counted by cause sum to the entry's zero count, which
// equals the count of exact zeros in the gradient the page holds, and the
// counts shown are those; a softmax row click shows its Jacobian; teacher
// mode hides the answers, and "show" shows them; no console or page error;
// screenshots non-blank at widths 390, 1366 and 1920. One line per check,
// "ok - ..." or "FAIL - ..."; exit 1 when any failed.
import { chromium } from 'playwright-core';
import { resolve, basename } from 'node:path';
import { pathToFileURL } from 'node:url';

let failures = 0;
function check(ok, what, detail) {
  if (!ok) failures++;
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${ok || !detail ? '' : `: ${detail}`}`);
  return ok;
}

// The share of a screenshot's pixels off its most common colour, in the
// page (the screenshot decoded by the browser itself).
async function inkShare(page, png) {
  return page.evaluate(async (b64) => {
    const img = new Image();
    img.src = 'data:image/png;base64,' + b64;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width; c.height = img.height;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    const d = g.getImageData(0, 0, c.width, c.height).data, count = new Map();
    for (let i = 0; i < d.length; i += 4) {
      const k = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
      count.set(k, (count.get(k) || 0) + 1);
    }
    return { share: 1 - Math.max(...count.values()) / (d.length / 4), colours: count.size };
  }, png.toString('base64'));
}

// The checks of the embedded data of one entry (no clicks).
function checkEntryData(name, k, e, d) {
  let fails = 0, n = 0;
  for (const inp of e.inputs)
    inp.cells.forEach((cell, q) => {
      const a = Number(inp.analytic[q]), nu = Number(inp.numeric[q]);
      n++;
      if (!(Math.abs(a - nu) <= d.atol + d.rtol * Math.abs(nu))) fails++;
      if (a !== Number(inp.dx[cell])) fails++; /* the same backward */
    });
  check(fails === 0, `${name} entry ${k + 1} (${e.op} -> ${e.name}): ${n} finite-difference checks pass`,
    `${fails} fail`);
  const z = e.zeros;
  const exact = e.dy.filter((v) => v === 0).length;
  const byCode = [0, 0, 0, 0];
  e.zero.forEach((c, i) => { byCode[c]++; if ((c === 0) !== (e.dy[i] !== 0)) byCode[0] = NaN; });
  check(z.masked + z.one_choice + z.not_read === z.total && z.total === exact &&
        byCode[1] === z.masked && byCode[2] === z.one_choice && byCode[3] === z.not_read,
    `${name} entry ${k + 1}: zeros by cause ${z.masked} + ${z.one_choice} + ${z.not_read} = ` +
    `${z.total}, the exact zeros of dL/d(${e.name || 'out'})`,
    `exact ${exact}, per cell ${byCode.join(',')}`);
  return byCode;
}

async function clickCheck(page, s, k, e, inp) {
  const q = Math.floor(inp.cells.length / 2), cell = inp.cells[q];
  const at = await page.evaluate(([s, w, f]) => window.tgStepper.cellCenter(s, w, f),
    [s, 'input' + inp.i, cell]);
  await page.mouse.click(at.x, at.y);
  const text = await page.evaluate(([s, w]) => window.tgStepper.panel(s, w), [s, 'input' + inp.i]);
  check(/: pass$/.test(text) && text.includes('analytic') && text.includes('numeric'),
    `entry ${k + 1} input ${inp.i}: a click on cell ${cell} shows its check, passing`, text);
}

// The lesson's causal head: masked_fill's upstream gradient (B,T,T) is 0
// at the T(T-1)/2 masked cells of each sequence, at row 0's one unmasked
// cell (a one-choice row), and, when the loss reads only the last token,
// at the other cells of rows 0..T-2: T(T-1)/2 - 1 of them, not read.
function lessonZeros(name, d, lastOnly) {
  const e = d.entries.find((x) => x.op === 'masked_fill');
  if (!check(!!e, `${name}: has the lesson's masked_fill`)) return;
  const T = e.shape[e.shape.length - 1], B = e.dy.length / (T * T);
  const want = { masked: B * T * (T - 1) / 2, one_choice: B,
    not_read: lastOnly ? B * (T * (T - 1) / 2 - 1) : 0 };
  const z = e.zeros;
  check(z.masked === want.masked && z.one_choice === want.one_choice && z.not_read === want.not_read,
    `${name}: masked_fill's zeros: ${want.masked} masked, ${want.one_choice} one-choice, ` +
    `${want.not_read} not read (B ${B}, T ${T}${lastOnly ? ', the loss reads the last token' : ''})`,
    JSON.stringify(z));
}

// The tape section's counts of exact zeros (tg_report_tape, after the
// backward) against the stepper's, entry by entry where both name it.
async function tapeZeros(page, name, d) {
  const nodes = await page.evaluate(() => {
    const s = document.querySelector('section[data-kind="tape"] script.tg-data');
    return s ? JSON.parse(s.textContent).nodes : [];
  });
  let compared = 0, wrong = [];
  for (const n of nodes) {
    const m = /^#\d+ (\S+)\n(.+) \(/.exec(n.text || '');
    if (!m || n.id[0] !== 'e') continue;
    const e = d.entries.find((x) => x.op === m[1] && x.name === m[2]);
    if (!e) continue;
    compared++;
    if ((n.zeros || 0) !== e.zeros.total) wrong.push(`${m[2]}: tape ${n.zeros || 0}, stepper ${e.zeros.total}`);
  }
  if (compared)
    check(wrong.length === 0, `${name}: the stepper's zero counts equal the tape's on ${compared} named entries`,
      wrong.join('; '));
  return compared;
}

async function stepper(page, name, s, lastOnly) {
  const N = await page.evaluate((s) => window.tgStepper.size(s), s);
  const d = await page.evaluate((s) => window.tgStepper.data(s), s);
  check(N >= 2 && N === d.entries.length, `${name}: stepper ${s} has ${N} entries`);
  const sec = page.locator('section[data-kind="backward"]').nth(s);
  await page.evaluate((s) => window.tgStepper.go(s, 0), s);
  const totals = [0, 0, 0, 0];
  let softmax = false;
  for (let k = 0; k < N; k++) {
    const pos = await sec.locator('.tg-bw-pos').textContent();
    check(pos === `entry ${k + 1} of ${N}`, `${name}: reads "entry ${k + 1} of ${N}"`, pos);
    const e = d.entries[k];
    const byCode = checkEntryData(name, k, e, d);
    byCode.forEach((n, i) => { totals[i] += n; });
    const shown = await sec.locator('.tg-bw-zeros').textContent();
    check(shown.includes(`${e.zeros.total} of ${e.dy.length}`) &&
          shown.includes(`masked ${e.zeros.masked},`) &&
          shown.includes(`one-choice row ${e.zeros.one_choice},`) &&
          shown.includes(`not read by the loss (or cut by an op) ${e.zeros.not_read}`),
      `${name} entry ${k + 1}: the counts shown are the embedded ones`, shown);
    if (e.inputs.length) await clickCheck(page, s, k, e, e.inputs[0]);
    if (e.shape.length === 3 && e.shape[0] > 1) {
      await sec.locator('.tg-bw-heat select').first().selectOption('1');
      const picks = await sec.locator('.tg-bw-heat select').evaluateAll((x) => x.map((y) => y.value));
      check(picks[0] === '1' && picks[1] === '1',
        `${name} entry ${k + 1}: the value's slice picker moves the gradient's too`, picks.join(','));
    }
    if (e.op === 'softmax' && !softmax) {
      softmax = true;
      const at = await page.evaluate((s) => window.tgStepper.cellCenter(s, 'value', 0), s);
      await page.mouse.click(at.x, at.y);
      const jac = await sec.locator('.tg-bw-jac').count();
      check(jac === 1, `${name} entry ${k + 1}: a row click shows diag(p) - p p^T`);
    }
    // the next entry by each of the three ways, in turn
    if (k + 1 < N) {
      if (k % 3 === 0) { await sec.focus(); await page.keyboard.press('ArrowRight'); }
      else if (k % 3 === 1) await sec.locator('.tg-bw-next').click();
      else await sec.locator('.tg-bw-slider').fill(String(k + 1));
    }
  }
  lessonZeros(name, d, lastOnly);
  if (await tapeZeros(page, name, d) === 0)
    console.log(`# ${name}: no tape entry named as the stepper's, none compared`);
  await sec.locator('.tg-bw-prev').click();
  check(await sec.locator('.tg-bw-pos').textContent() === `entry ${N - 1} of ${N}`,
    `${name}: previous goes back one`);
  await sec.locator('.tg-bw-slider').focus();
  await page.keyboard.press('ArrowLeft');
  check(await sec.locator('.tg-bw-pos').textContent() === `entry ${N - 2} of ${N}`,
    `${name}: an arrow on the slider steps one entry, not two`);
  await page.keyboard.press('Home');
  const home = await sec.locator('.tg-bw-pos').textContent();
  await page.keyboard.press('End');
  const end = await sec.locator('.tg-bw-pos').textContent();
  check(home === `entry 1 of ${N}` && end === `entry ${N} of ${N}`,
    `${name}: Home and End go to the first and the last entry`, `${home}, ${end}`);
  console.log(`# ${name}: zeros over the tape: masked ${totals[1]}, one-choice ${totals[2]}, not read ${totals[3]}`);
  return totals;
}

async function teacher(page, name, s) {
  const sec = page.locator('section[data-kind="backward"]').nth(s);
  await page.evaluate((s) => { window.tgStepper.go(s, 1); window.tgStepper.teacher(s, true); }, s);
  const hidden = await sec.locator('.tg-bw-body').evaluateAll((b) =>
    b.every((x) => getComputedStyle(x).display === 'none'));
  const n = await sec.locator('.tg-bw-show').count();
  check(hidden && n >= 2, `${name}: teacher mode hides the ${n} answers`);
  await sec.locator('.tg-bw-show').first().click();
  const shown = await sec.locator('.tg-bw-body').first().evaluate((x) => getComputedStyle(x).display !== 'none');
  check(shown, `${name}: "show" shows the answer`);
  await page.evaluate((s) => window.tgStepper.teacher(s, false), s);
}

async function screenshots(page, name) {
  for (const width of [390, 1366, 1920]) {
    await page.setViewportSize({ width, height: 900 });
    const sec = page.locator('section[data-kind="backward"]').first();
    await sec.scrollIntoViewIfNeeded();
    const ink = await inkShare(page, await page.screenshot());
    check(ink.share > 0.02 && ink.colours > 8,
      `${name}: screenshot at width ${width} is not blank (${(100 * ink.share).toFixed(1)}% ink)`);
    const over = await sec.evaluate((x) => x.scrollWidth - x.clientWidth);
    check(over <= 1, `${name}: the stepper fits the ${width} px window`, `${over} px over`);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  for (const arg of process.argv.slice(2)) {
    // PAGE.html, or PAGE.html=last when its loss reads only the last token
    const [file, last] = arg.split('=');
    const name = basename(file);
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    const errors = [];
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(pathToFileURL(resolve(file)).href, { waitUntil: 'load' });
    await page.waitForFunction(() => window.tgStepper && window.tgStepper.ready, null, { timeout: 10000 });
    const count = await page.evaluate(() => window.tgStepper.count());
    check(count >= 1, `${name}: has a backward stepper`);
    for (let s = 0; s < count; s++) {
      await stepper(page, name, s, last === 'last');
      await teacher(page, name, s);
    }
    await screenshots(page, name);
    check(errors.length === 0, `${name}: no console or page errors`, errors.join(' | '));
    await page.close();
  }
} catch (e) {
  check(false, 'the test ran to its end', e.stack);
} finally {
  await browser.close();
}
console.log(`# ${failures} failed`);
process.exit(failures ? 1 : 0);
