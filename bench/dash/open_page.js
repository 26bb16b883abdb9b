// Keeps the daemon's dashboard open in headless Chromium (Debian's chromium,
// driven by puppeteer-core) until stdin closes: the "dashboard open" state
// of bench/dash/run.sh. Prints "open" once the page is live (its event
// stream connected and one render done), and at the end how many times the
// page fetched and drew the daemon's state meanwhile: proof that it worked
// during the measurement.
'use strict';
const puppeteer = require('puppeteer-core');

(async () => {
  const base = process.argv[2];
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-extensions'],
  });
  const page = await browser.newPage();
  await page.goto(base + '/', { waitUntil: 'load' });
  await page.waitForFunction(() => window.__rt && window.__rt.renders > 0);
  await page.waitForFunction(() => document.getElementById('live').textContent === 'live');
  const before = await page.evaluate(() => window.__rt.renders);
  console.log('open');
  process.stdin.resume();
  process.stdin.on('end', async () => {
    const after = await page.evaluate(() => window.__rt.renders);
    console.log(`renders while open: ${after - before}`);
    await browser.close();
    process.exit(0);
  });
})().catch((e) => { console.error(e); process.exit(1); });
