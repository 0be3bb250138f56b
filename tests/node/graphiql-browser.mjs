// GraphiQL in a real browser, with every request to another host refused: runs the
// README's first task the way a person would (a query, mutations with variables, a
// subscription that streams to COMPLETED, the answer) and asserts on what the page shows.
// With KFS_BROWSER_SCENARIO=answer it follows researchTaskAnswer instead, and asserts the
// answer appeared in parts before the `done` message.
//
// node graphiql-browser.mjs <base url> <screenshot dir> [bearer]
// With a bearer the page carries no token of its own (a real secret): it goes into the
// Headers tab, which authenticates HTTP requests and the WebSocket alike.
// Prints one JSON line: { ok, screenshots, steps, blocked, sockets, errors }.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { launch, offlineContext } from "./offline-browser.mjs";

const [base, shots, bearer] = process.argv.slice(2);
const origin = new URL(base);
mkdirSync(shots, { recursive: true });

const report = { ok: false, screenshots: [], steps: [], blocked: [], sockets: [], errors: [] };
const browser = await launch();

try {
  // Nothing may leave the machine: every request to another host is refused and noted.
  const context = await offlineContext(browser, origin, report.blocked, { width: 1400, height: 900 });
  const page = await context.newPage();
  page.on("websocket", (socket) => report.sockets.push(socket.url()));
  page.on("console", (message) => { if (message.type() === "error") report.errors.push(message.text()); });
  page.on("pageerror", (error) => report.errors.push(error.message));

  await page.goto(new URL("/graphiql", origin).toString());
  await page.waitForSelector(".graphiql-query-editor .CodeMirror", { timeout: 30000 });

  const setEditor = (selector, text) =>
    page.evaluate(([selector, text]) => document.querySelector(selector).CodeMirror.setValue(text), [selector, text]);
  const result = () => page.evaluate(() => document.querySelector(".graphiql-response .CodeMirror").CodeMirror.getValue());
  const tab = (name) => page.getByRole("button", { name, exact: true }).click();
  const visibleTool = ".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror";

  if (bearer) {
    await tab("Headers");
    await setEditor(visibleTool, JSON.stringify({ Authorization: `Bearer ${bearer}` }));
  }

  // Runs a document with variables; waits until the result pane shows `expected`.
  async function run(name, query, variables, expected) {
    await tab("Variables");
    await setEditor(visibleTool, JSON.stringify(variables ?? {}));
    await setEditor(".graphiql-query-editor .CodeMirror", query);
    await page.click(".graphiql-execute-button");
    const deadline = Date.now() + 60000;
    let text = "";
    while (Date.now() < deadline) {
      text = await result();
      if (text.includes(expected)) break;
      await page.waitForTimeout(100);
    }
    const path = join(shots, `${String(report.steps.length + 1).padStart(2, "0")}-${name}.png`);
    await page.screenshot({ path });
    report.screenshots.push(path);
    report.steps.push({ name, shows: text.slice(0, 400) });
    if (!text.includes(expected)) throw new Error(`${name}: the result pane never showed ${expected}: ${text}`);
    return text.includes("{") ? JSON.parse(text) : text;
  }

  const viewer = await run("viewer", "{ viewer { tenantId subjectId channel } }", {}, "subjectId");
  if (!viewer.data?.viewer?.subjectId) throw new Error(`no viewer: ${JSON.stringify(viewer)}`);
  const created = await run("space", 'mutation { createKnowledgeSpace(input: { name: "Notes" }) { id } }', {}, "\"id\"");
  const space = created.data.createKnowledgeSpace.id;
  await run(
    "document",
    'mutation($space: UUID!) { addKnowledgeDocument(input: { knowledgeSpaceId: $space, title: "Tides", content: "Tides are caused by the gravitational pull of the moon and the sun." }) { id } }',
    { space },
    "addKnowledgeDocument"
  );
  const task = await run(
    "task",
    'mutation($space: UUID!) { createResearchTask(input: { knowledgeSpaceId: $space, query: "What causes tides?", mode: FAST, topK: 3, budgetUsd: 0.5, limits: {}, metadata: {} }) { id stage rowVersion } }',
    { space },
    "createResearchTask"
  );
  const id = task.data.createResearchTask.id;
  if (process.env.KFS_BROWSER_SCENARIO === "answer") {
    // The answer as a model streams it: the result pane shows each delta in turn.
    await tab("Variables");
    await setEditor(visibleTool, JSON.stringify({ task: id }));
    await setEditor(
      ".graphiql-query-editor .CodeMirror",
      "subscription($task: UUID!) { researchTaskAnswer(taskId: $task) { offset text done reset } }"
    );
    await page.click(".graphiql-execute-button");
    const seen = [];
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      const text = await result();
      if (text.includes("researchTaskAnswer") && !seen.includes(text)) {
        seen.push(text);
        if (seen.length === 2) {
          const path = join(shots, "05-answer-streaming.png");
          await page.screenshot({ path });
          report.screenshots.push(path);
        }
      }
      if (text.includes('"done": true')) break;
      await page.waitForTimeout(25);
    }
    const path = join(shots, "05-answer-done.png");
    await page.screenshot({ path });
    report.screenshots.push(path);
    const partial = seen.filter((text) => text.includes('"done": false'));
    report.steps.push({ name: "answer stream", shows: seen.map((text) => text.slice(0, 300)) });
    if (partial.length < 2) throw new Error(`the answer did not stream: ${JSON.stringify(seen)}`);
    if (!seen.at(-1)?.includes('"done": true')) throw new Error(`no done message: ${JSON.stringify(seen)}`);
  } else {
    await run(
      "subscription",
      "subscription($task: UUID!) { researchTaskProgress(taskId: $task) { sequence eventType stage } }",
      { task: id },
      "COMPLETED"
    );
  }
  const answer = await run(
    "answer",
    "query($task: UUID!) { researchTask(id: $task) { stage answerTrace { answer } } }",
    { task: id },
    "moon"
  );
  if (answer.data?.researchTask?.stage !== "COMPLETED") throw new Error(`the task is ${JSON.stringify(answer)}`);
  report.ok = report.blocked.length === 0 && report.sockets.every((url) => new URL(url).host === origin.host);
} catch (error) {
  report.errors.push(String(error?.stack ?? error));
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
