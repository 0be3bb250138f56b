// Drives the /mcp endpoint with the official TypeScript SDK client (@modelcontextprotocol/sdk),
// as Claude Desktop, Cursor or VS Code would: connect with a bearer token, list the tools,
// then act as told, printing one JSON line per step for the Rust test to read. Any failure
// exits non-zero with the error on stderr.
//
// Usage: node mcp-research.mjs MCP_URL BEARER SCRIPT_JSON
//   SCRIPT_JSON: [{"call": "tool", "arguments": {...}}, {"until": "tool", "arguments": {...},
//                 "stage": ["completed", "failed"]}, {"research": {...}}]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, bearer, scriptText = '[]'] = process.argv.slice(2);
if (!url || !bearer) {
  console.error('usage: mcp-research.mjs MCP_URL BEARER SCRIPT_JSON');
  process.exit(2);
}
const script = JSON.parse(scriptText);
const print = (line) => console.log(JSON.stringify(line));

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${bearer}` } },
});
const client = new Client({ name: 'kfs-tests', version: '1.0.0' });
await client.connect(transport);
print({ connected: client.getServerVersion(), protocol: transport.protocolVersion ?? null });
const { tools } = await client.listTools();
print({ tools: tools.map(({ name, inputSchema, outputSchema }) => ({ name, inputSchema, outputSchema })) });

// `$task` in arguments stands for the task id the last start_research returned.
let task = null;
const bind = (args) => JSON.parse(JSON.stringify(args ?? {}).replaceAll('"$task"', JSON.stringify(task)));

for (const step of script) {
  if (step.call) {
    const result = await client.callTool({ name: step.call, arguments: bind(step.arguments) });
    if (step.call === 'start_research' && result.structuredContent?.task_id) task = result.structuredContent.task_id;
    print({ call: step.call, result });
  } else if (step.until) {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const result = await client.callTool({ name: step.until, arguments: bind(step.arguments) });
      if (result.isError || step.stage.includes(result.structuredContent?.stage)) {
        print({ call: step.until, result });
        break;
      }
      if (Date.now() > deadline) throw new Error(`${step.until} did not reach ${step.stage} in time`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } else if (step.research) {
    const progress = [];
    const result = await client.callTool({ name: 'research', arguments: bind(step.research) }, undefined, {
      onprogress: (update) => progress.push(update),
      timeout: 60_000,
    });
    print({ call: 'research', progress, result });
  }
}
await client.close();
print({ closed: true });
