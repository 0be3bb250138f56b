// Sends one text frame of SIZE bytes (default 10 MiB) on a graphql-transport-ws
// connection with Node's `ws` client, and prints the close code and reason the client
// saw as one JSON line: {"code":1009,"reason":"Message too big"}. A connection reset
// shows as 1006 (abnormal closure), which is what the server must not cause.
//
// Usage: node ws-oversized-frame.mjs WS_URL [SIZE]
import WebSocket from 'ws';

const [url, size = String(10 * 1024 * 1024)] = process.argv.slice(2);
if (!url) {
  console.error('usage: ws-oversized-frame.mjs WS_URL [SIZE]');
  process.exit(2);
}

const socket = new WebSocket(url, 'graphql-transport-ws');
const timer = setTimeout(() => {
  console.error('no close within 20 s');
  process.exit(1);
}, 20000);
socket.on('open', () => {
  socket.send('x'.repeat(Number(size)));
});
socket.on('error', () => {
  // The close event follows with the code the client settled on.
});
socket.on('close', (code, reason) => {
  clearTimeout(timer);
  console.log(JSON.stringify({ code, reason: reason.toString() }));
  process.exit(0);
});
