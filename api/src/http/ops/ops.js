// The operations page: the token stays in this closure (no storage, no cookie); the
// stream is read with fetch so it can carry the Authorization header.
(() => {
  let token = "";
  const history = [];
  const $ = (id) => document.getElementById(id);

  function table(id, head, rows) {
    const element = $(id);
    element.replaceChildren();
    const header = element.insertRow();
    head.forEach((name) => { const cell = document.createElement("th"); cell.textContent = name; header.appendChild(cell); });
    rows.forEach((row) => {
      const line = element.insertRow();
      row.forEach((value) => {
        const cell = line.insertCell();
        if (value instanceof Node) cell.appendChild(value); else cell.textContent = String(value ?? "");
      });
    });
  }

  function chart() {
    const svg = $("chart");
    const max = Math.max(1, ...history);
    const step = 600 / Math.max(1, history.length - 1);
    const points = history.map((value, index) => `${index * step},${110 - (value / max) * 100}`).join(" ");
    svg.innerHTML = "";
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "steelblue");
    line.setAttribute("stroke-width", "2");
    svg.appendChild(line);
  }

  async function redeliver(id) {
    const response = await fetch(`/ops/outbox/${id}/redeliver`, { method: "POST", headers: { Authorization: `Bearer ${token}` } });
    $("status").textContent = response.ok ? `Outbox row ${id} is pending again.` : `Redelivery of ${id} failed (${response.status}).`;
  }

  function render(message) {
    if (message.error) { $("status").textContent = message.error; return; }
    const snapshot = message.snapshot;
    const stages = Object.fromEntries(snapshot.stages);
    history.push(stages.queued ?? 0);
    if (history.length > 120) history.shift();
    $("board").hidden = false;
    $("status").textContent = `Live, updated ${new Date(snapshot.at).toLocaleTimeString()}.`;
    $("summary").textContent = `${stages.queued ?? 0} queued; oldest waiting ${snapshot.oldest_queued_seconds.toFixed(1)} s; ` +
      `${snapshot.completed_last_minute} completed in the last minute; ` +
      `${snapshot.awaiting_input.reduce((sum, [, count]) => sum + count, 0)} waiting for input; ` +
      `${snapshot.threads.threads} research threads, ${snapshot.threads.enqueued_turns} turns waiting behind another.`;
    chart();
    table("stages", ["stage", "tasks"], snapshot.stages);
    table("running", ["task", "stage", "worker", "lease expires"],
      snapshot.running.map((row) => [row.id, row.stage, row.worker_id, row.lease_expires_at ? new Date(row.lease_expires_at).toLocaleTimeString() : ""]));
    table("failures", ["task", "error", "at"], snapshot.failures.map((row) => [row.id, row.error, new Date(row.updated_at).toLocaleTimeString()]));
    table("outbox", ["status", "rows"], snapshot.outbox);
    table("awaiting", ["waiting for", "tasks"], snapshot.awaiting_input);
    table("dead", ["dead row", "task", "last error", ""], snapshot.dead_outbox.map((row) => {
      const button = document.createElement("button");
      button.textContent = "Redeliver";
      button.addEventListener("click", () => redeliver(row.id));
      return [row.id, row.research_task_job_id, row.last_error, button];
    }));
    table("open", ["what", "kind", "open"], message.open.map((row) => [row.name, row.kind, row.count]));
    table("tenants", ["tenant", "unfinished tasks"], snapshot.tenants.map((row) => [row.tenant_id, row.unfinished]));
  }

  async function follow() {
    const response = await fetch("/ops/stream", { headers: { Authorization: `Bearer ${token}` } });
    if (!response.ok) { $("status").textContent = "Refused: this token is not an operator's."; return; }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = event.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("\n");
        if (data) render(JSON.parse(data));
      }
    }
    $("status").textContent = "Disconnected.";
  }

  window.addEventListener("DOMContentLoaded", () => {
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      token = $("token").value.trim();
      $("token").value = "";
      $("status").textContent = "Connecting…";
      follow().catch((error) => { $("status").textContent = `Disconnected: ${error}`; });
    });
  });
})();
