// One screenshot of the operations page while something else keeps the server busy (the
// throughput bench): signs in with an operator's token, waits until the page is live and
// has drawn `wait` more milliseconds of its chart, and saves the page.
//
// node ops-screenshot.mjs <base url> <operator token> <png path> <wait ms>
// Prints one JSON line: { ok, screenshot, blocked, errors }.
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { launch, offlineContext } from "./offline-browser.mjs";

const [base, operator, path, wait] = process.argv.slice(2);
const origin = new URL(base);
mkdirSync(dirname(path), { recursive: true });
const report = { ok: false, screenshot: path, blocked: [], errors: [] };
const browser = await launch();
try {
  const context = await offlineContext(browser, origin, report.blocked, { width: 1400, height: 1000 });
  const page = await context.newPage();
  page.on("pageerror", (error) => report.errors.push(error.message));
  await page.goto(new URL("/ops", origin).toString());
  await page.fill("#token", operator);
  await page.click("#login button");
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Live"), null, { timeout: 15000 });
  await page.waitForTimeout(Number(wait));
  await page.screenshot({ path, fullPage: true });
  report.ok = report.blocked.length === 0 && report.errors.length === 0;
} catch (error) {
  report.errors.push(String(error?.stack ?? error));
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
