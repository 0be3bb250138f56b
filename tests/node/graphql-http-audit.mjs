// Runs the graphql-http server audit against a live endpoint and fails on any error or
// warning. Usage: node graphql-http-audit.mjs http://127.0.0.1:PORT/graphql
import { auditServer } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node graphql-http-audit.mjs URL');
  process.exit(2);
}
const results = await auditServer({ url });
const counts = { ok: 0, warn: 0, error: 0 };
for (const result of results) {
  counts[result.status] += 1;
  if (result.status !== 'ok') {
    const detail = result.response ? ` (status ${result.response.status})` : '';
    console.log(`${result.status.toUpperCase()} ${result.id} ${result.name}: ${result.reason}${detail}`);
  }
}
console.log(`graphql-http audit: ${counts.ok} ok, ${counts.warn} warnings, ${counts.error} errors`);
process.exit(counts.warn + counts.error === 0 ? 0 : 1);
