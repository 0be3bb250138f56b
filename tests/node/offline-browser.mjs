// What both browser scripts share: Debian's Chromium launched headless, and a context in
// which nothing may leave the machine (every request to another host than `origin` is
// refused and noted in `blocked`).
import { chromium } from "playwright-core";

export async function launch() {
  return chromium.launch({
    executablePath: process.env.KFS_CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
}

export async function offlineContext(browser, origin, blocked, viewport) {
  const context = await browser.newContext({ viewport });
  await context.route("**/*", (route) => {
    const url = new URL(route.request().url());
    if (url.host === origin.host) return route.continue();
    blocked.push(url.toString());
    return route.abort();
  });
  return context;
}
