// The official TypeScript MCP client (@modelcontextprotocol/sdk) against a
// running agentbus, over Streamable HTTP with a credential. Usage:
//
//   node mcp-client.mjs ENDPOINT HEADER VALUE WRONG_VALUE
//
// It writes one JSON line per step to stdout and reads lines from stdin
// where the Go test must act (publish an event as a processor would). It
// exits non-zero on the first failure, saying why on stderr.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { createInterface } from "node:readline";

const [endpoint, header, value, wrong] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const fail = (msg) => {
  process.stderr.write(msg + "\n");
  process.exit(1);
};

function transport(v) {
  return new StreamableHTTPClientTransport(new URL(endpoint), {
    requestInit: { headers: header ? { [header]: v } : {} },
  });
}

// A wrong credential is refused.
if (header) {
  const bad = new Client({ name: "agentbus-interop-bad", version: "1.0.0" });
  let refused = false;
  try {
    await bad.connect(transport(wrong));
  } catch (e) {
    refused = /401|Unauthorized|UNAUTHENTICATED/i.test(String(e));
    if (!refused) fail("a wrong credential failed otherwise: " + e);
  }
  if (!refused) fail("a wrong credential connected");
  say({ step: "wrong-credential-refused" });
}

const client = new Client({ name: "agentbus-interop", version: "1.0.0" });
const logs = [];
const updates = [];
const waiters = [];
const settle = () => {
  for (let i = waiters.length - 1; i >= 0; i--) {
    const w = waiters[i];
    const hit = w.find();
    if (hit) {
      waiters.splice(i, 1);
      w.resolve(hit);
    }
  }
};
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  logs.push(n.params);
  settle();
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push(n.params);
  settle();
});
const waitFor = (what, find) =>
  new Promise((resolve, reject) => {
    const hit = find();
    if (hit) return resolve(hit);
    const timer = setTimeout(() => reject(new Error("timed out waiting for " + what)), 20000);
    waiters.push({ find, resolve: (x) => { clearTimeout(timer); resolve(x); } });
  });
const pushed = (corr, type) => () =>
  logs.find((l) => l._meta?.correlationId === corr && l.data?.type === type)?.data;

await client.connect(transport(value));
await client.setLoggingLevel("info");
say({ step: "connected", server: client.getServerVersion() });

const { tools } = await client.listTools();
say({ step: "tools", names: tools.map((t) => t.name) });

const structured = (res, name) => {
  if (res.isError) fail(name + " failed: " + JSON.stringify(res.structuredContent ?? res.content));
  return res.structuredContent;
};

// The generic tool: a whole envelope.
const submitted = structured(
  await client.callTool({
    name: "submitCommand",
    arguments: {
      body: {
        specversion: "1.0", id: "ts-1", source: "interop-ts", type: "PlaceOrder",
        datacontenttype: "application/json", dataschema: "place-order/1.0", time: "2026-01-01T12:00:00Z",
        data: { orderId: "ts-o-1", customer: "ada", items: [{ sku: "tea", quantity: 1 }] },
      },
    },
  }),
  "submitCommand",
);
const placed = await waitFor("OrderPlaced of submitCommand", pushed(submitted.id, "OrderPlaced"));
say({ step: "submit-pushed", id: submitted.id, event: placed });

// A typed tool: the data alone.
const order = { orderId: "ts-o-2", customer: "ada", currency: "EUR", items: [{ sku: "tea", quantity: 2 }] };
const typed = structured(await client.callTool({ name: "place_order", arguments: order }), "place_order");
const placed2 = await waitFor("OrderPlaced of place_order", pushed(typed.id, "OrderPlaced"));
say({ step: "typed-pushed", id: typed.id, event: placed2 });

// The same order again: rejected, and the rejection pushed.
const again = structured(await client.callTool({ name: "place_order", arguments: order }), "place_order again");
const rejected = await waitFor("CommandRejected", pushed(again.id, "CommandRejected"));
say({ step: "rejected-pushed", id: again.id, event: rejected });

// A command no rule processes: subscribe to its resource, read it, and
// be told when the Go test publishes its event as a processor would.
const ship = structured(
  await client.callTool({ name: "ship_order", arguments: { orderId: "ts-o-2", carrier: "dhl" } }),
  "ship_order",
);
const uri = "agentbus://commands/" + ship.id;
await client.subscribeResource({ uri });
const before = JSON.parse((await client.readResource({ uri })).contents[0].text);
say({ step: "subscribed", id: ship.id, uri, status: before.status, events: before.events.length });
await lines.next(); // the Go test published the event
const update = await waitFor("resources/updated", () => updates.find((u) => u.uri === uri));
const after = JSON.parse((await client.readResource({ uri })).contents[0].text);
say({ step: "updated", event: update._meta?.event, events: after.events.length });

// A tool error carries the error body.
const bad = await client.callTool({ name: "getCommandSchema", arguments: { schema: "nope", version: "1.0" } });
say({ step: "tool-error", isError: bad.isError, body: bad.structuredContent });

await client.close();
say({ step: "done" });
process.exit(0);
