// The README's picture of a report page: train_head's page in headless
// Chromium, the mouse on the trained attention heatmap's query row (so the
// readout shows an exact weight), the section cut out as a PNG.
//
//     examples/train_head --html /tmp/train_head.html
//     node tests/browser/screenshot.mjs /tmp/train_head.html docs/report.png
import { chromium } from 'playwright-core';
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pagePath, pngPath] = process.argv.slice(2);
if (!pagePath || !pngPath) {
  console.error('usage: node screenshot.mjs PAGE.html OUT.png');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  await page.goto(pathToFileURL(resolve(pagePath)).href);
  await page.waitForFunction(() => window.tgReport && window.tgReport.ready);
  // the heatmap after training (its title says "after" or "trained"), else
  // the first heatmap
  const id = await page.$$eval('section.tg-section[data-kind="heatmap"]', (ss) => {
    const s = ss.find((x) => /after|(^|[^n])trained/i.test(x.querySelector('h2').textContent));
    return (s || ss[0]).id;
  });
  // the query's row (the last) and the column of its largest weight, from
  // the section's data (rows, cols, v: the values row-major); else (0, 0)
  const [row, col] = await page.$eval(`#${id} script.tg-data`, (e) => {
    const d = JSON.parse(e.textContent);
    const r = d.rows - 1;
    let best = 0;
    for (let j = 0; j < d.cols; j++) {
      const v = d.v[r * d.cols + j];
      if (typeof v === 'number' && v > d.v[r * d.cols + best]) best = j;
    }
    return [r, best];
  }).catch(() => [0, 0]);
  const p = await page.evaluate(([sid, r, c]) => window.tgReport.cellCenter(sid, r, c),
    [id, row, col]);
  await page.mouse.move(p.x, p.y, { steps: 2 });
  await page.locator(`#${id}`).screenshot({ path: pngPath });
  console.log(`${pngPath}: ${(statSync(pngPath).size / 1024).toFixed(0)} KB, ` +
    `${id} hovered at row ${row}, col ${col}`);
} finally {
  await browser.close();
}
