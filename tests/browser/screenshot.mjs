// The README's picture of a report page: train_head's page in headless
// Chromium, the mouse on the query's row of the trained head's attention
// figure (so the readout shows the exact weight, the row's entropy and
// gain), that section cut out as a PNG.
//
//     examples/train_head --out /tmp/pictures --html /tmp/train_head.html
//     node tests/browser/screenshot.mjs /tmp/train_head.html docs/report.png
//
// With "stepper" after them, the backward stepper instead (docs/stepper.png):
// the entry of masked_fill, its zeros hatched by cause, a cell of what it
// passes back clicked for its finite-difference check.
//
//     node tests/browser/screenshot.mjs /tmp/train_head.html docs/stepper.png stepper
import { chromium } from 'playwright-core';
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pagePath, pngPath, what] = process.argv.slice(2);
if (!pagePath || !pngPath) {
  console.error('usage: node screenshot.mjs PAGE.html OUT.png');
  process.exit(2);
}
// The stepper at masked_fill's entry, a cell below the diagonal of its
// input's gradient clicked, cut from the section's top to the check.
async function stepperShot(page) {
  const k = await page.evaluate(() => window.tgStepper.data(0).entries
    .findIndex((e) => e.op === 'masked_fill'));
  await page.evaluate((k) => window.tgStepper.go(0, k), k);
  const T = await page.evaluate(() => window.tgStepper.entry(0).shape.slice(-1)[0]);
  const cell = (T - 1) * T + 1; // the last row, an unmasked column
  const at = await page.evaluate((f) => window.tgStepper.cellCenter(0, 'input0', f), cell);
  await page.mouse.click(at.x, at.y);
  const sec = page.locator('section.tg-section[data-kind="backward"]');
  await sec.scrollIntoViewIfNeeded();
  const top = await sec.boundingBox();
  const end = await sec.locator('.tg-bw-check').first().boundingBox();
  await page.screenshot({ path: pngPath, fullPage: true,
    clip: { x: top.x, y: top.y + await page.evaluate(() => window.scrollY),
            width: top.width, height: end.y + end.height - top.y + 8 } });
  console.log(`${pngPath}: ${(statSync(pngPath).size / 1024).toFixed(0)} KB, ` +
    `entry ${k + 1} (masked_fill), cell ${cell} checked`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  await page.goto(pathToFileURL(resolve(pagePath)).href);
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready);
  if (what === 'stepper') {
    await stepperShot(page);
    process.exit(0);
  }
  // the lesson's attention figure of the trained head (slider, readout,
  // the row's entropy and gain), the mouse on the query's row (the last) at
  // its largest weight
  const id = await page.$eval('section.tg-section[data-kind="attention"]', (s) => s.id);
  const [row, col] = await page.evaluate((sid) => {
    const w = window.tgReport.weights(sid), r = w.length - 1;
    let best = 0;
    w[r].forEach((v, j) => { if (v !== null && v > w[r][best]) best = j; });
    return [r, best];
  }, id);
  const p = await page.evaluate(([sid, r, c]) => window.tgReport.cellCenter(sid, r, c),
    [id, row, col]);
  await page.mouse.move(p.x, p.y, { steps: 2 });
  await page.locator(`#${id}`).screenshot({ path: pngPath });
  console.log(`${pngPath}: ${(statSync(pngPath).size / 1024).toFixed(0)} KB, ` +
    `${id} hovered at row ${row}, col ${col}`);
} finally {
  await browser.close();
}
