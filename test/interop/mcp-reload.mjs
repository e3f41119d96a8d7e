// The official TypeScript MCP client (@modelcontextprotocol/sdk) follows
// agentbus's tool list across a catalogue reload. Usage:
//
//   node mcp-reload.mjs ENDPOINT
//
// It lists the tools ({"step":"tools"}), waits for a line on stdin (the Go
// test has reloaded the catalogue), waits for
// notifications/tools/list_changed and lists the tools again
// ({"step":"tools-after"}). It exits non-zero on the first failure, saying
// why on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { createInterface } from "node:readline";

const [endpoint] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (msg) => {
  process.stderr.write(msg + "\n");
  process.exit(1);
};

const client = new Client({ name: "agentbus-interop-reload", version: "1.0.0" });
let changed;
const listChanged = new Promise((resolve) => (changed = resolve));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());
await client.connect(new StreamableHTTPClientTransport(new URL(endpoint)));
if (!client.getServerCapabilities()?.tools?.listChanged) fail("the server does not declare tools.listChanged");

const names = async () => (await client.listTools()).tools.map((t) => t.name);
say({ step: "tools", names: await names() });
await lines.next(); // reloaded
const timeout = setTimeout(() => fail("no notifications/tools/list_changed within 10s"), 10000);
await listChanged;
clearTimeout(timeout);
say({ step: "tools-after", names: await names() });
await client.close();
process.exit(0);
