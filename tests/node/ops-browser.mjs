// The operations page in a real browser, with every request to another host refused: a
// non-operator's token is refused; an operator's shows the queue live, lists a dead
// outbox row and redelivers it; the page never shows a task's query.
//
// node ops-browser.mjs <base url> <screenshot dir> <operator token> <other token> <secret text>
// Prints one JSON line: { ok, screenshots, blocked, errors, shown }.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { launch, offlineContext } from "./offline-browser.mjs";

const [base, shots, operator, other, secret] = process.argv.slice(2);
const origin = new URL(base);
mkdirSync(shots, { recursive: true });
const report = { ok: false, screenshots: [], blocked: [], errors: [], shown: "" };
const browser = await launch();
try {
  const context = await offlineContext(browser, origin, report.blocked, { width: 1400, height: 1000 });
  const page = await context.newPage();
  page.on("console", (message) => { if (message.type() === "error" && !message.text().includes("404")) report.errors.push(message.text()); });
  page.on("pageerror", (error) => report.errors.push(error.message));
  const shot = async (name) => {
    const path = join(shots, name);
    await page.screenshot({ path, fullPage: true });
    report.screenshots.push(path);
  };
  const connect = async (token) => {
    await page.fill("#token", token);
    await page.click("#login button");
  };

  await page.goto(new URL("/ops", origin).toString());
  await connect(other);
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Refused"), null, { timeout: 10000 });
  await shot("01-refused.png");

  await page.goto(new URL("/ops", origin).toString());
  await connect(operator);
  await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Live"), null, { timeout: 15000 });
  // Two snapshots, so the chart has a line.
  await page.waitForTimeout(2500);
  await shot("02-live.png");
  report.shown = await page.evaluate(() => document.body.innerText);
  if (report.shown.includes(secret)) throw new Error("the page shows a task's query");
  const redeliver = page.getByRole("button", { name: "Redeliver" }).first();
  await redeliver.click();
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("pending again"), null, { timeout: 10000 });
  await shot("03-redelivered.png");
  report.ok = report.blocked.length === 0;
} catch (error) {
  report.errors.push(String(error?.stack ?? error));
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
