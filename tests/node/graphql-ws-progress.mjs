// Follows one task's progress with the graphql-ws client (the library frontends use) and
// prints each execution result as one JSON line, then {"complete":true} when the server
// completes the subscription. The Rust test reads the lines; any failure exits non-zero.
//
// Usage: node graphql-ws-progress.mjs WS_URL BEARER TASK_ID [AFTER_SEQUENCE]
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, bearer, task, after = '0'] = process.argv.slice(2);
if (!url || !bearer || !task) {
  console.error('usage: graphql-ws-progress.mjs WS_URL BEARER TASK_ID [AFTER_SEQUENCE]');
  process.exit(2);
}

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${bearer}` },
  // A test wants to see a failure, not have it retried away.
  retryAttempts: 0,
});

const query = `subscription($task: UUID!, $after: Int) {
  researchTaskProgress(taskId: $task, afterSequence: $after) { sequence eventType stage }
}`;

try {
  for await (const result of client.iterate({ query, variables: { task, after: Number(after) } })) {
    console.log(JSON.stringify(result));
  }
  console.log(JSON.stringify({ complete: true }));
  await client.dispose();
} catch (error) {
  console.error('subscription failed:', error instanceof Error ? error.message : JSON.stringify(error));
  process.exit(1);
}
