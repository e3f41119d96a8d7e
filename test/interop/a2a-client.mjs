// Drives agentbus's A2A transport with @a2a-js/sdk, 1.x or 0.3.x (npm
// alias a2a-js-sdk-03), created with the SDK's default client factory
// options, only the fetch replaced to send the credential. Reads a job
// from stdin, prints what it saw as JSON on stdout (test/interop/a2a_node_test.go).
//
// Job: {"sdk": "1" | "0.3", "base": "<server or tenant base URL>",
//       "key": "<bearer credential>", "mode": "flow" | "get" | "live",
//       "submit": envelope, "stream": envelope, "reject": envelope,
//       "taskId": "<id, for get>"}
import * as v1 from "@a2a-js/sdk/client";
import { Role, taskStateToJSON } from "@a2a-js/sdk";
import * as v03 from "a2a-js-sdk-03/client";

const job = JSON.parse(await new Promise((resolve) => {
  let s = "";
  process.stdin.on("data", (d) => (s += d));
  process.stdin.on("end", () => resolve(s));
}));

const authed = (key) => (input, init = {}) => {
  const headers = new Headers(init.headers || (input instanceof Request ? input.headers : undefined));
  if (key) headers.set("Authorization", "Bearer " + key);
  return fetch(input, { ...init, headers });
};

const legacy = job.sdk === "0.3";
const sdk = legacy ? v03 : v1;

function factory(key) {
  const fetchImpl = authed(key);
  return new sdk.ClientFactory(sdk.ClientFactoryOptions.createFrom(sdk.ClientFactoryOptions.default, {
    transports: [new sdk.JsonRpcTransportFactory({ fetchImpl }), new sdk.RestTransportFactory({ fetchImpl })],
    cardResolver: new sdk.DefaultAgentCardResolver({ fetchImpl }),
  }));
}

function message(data) {
  if (legacy) {
    return { message: { kind: "message", messageId: crypto.randomUUID(), role: "user", parts: [{ kind: "data", data }] } };
  }
  return {
    tenant: "", configuration: undefined, metadata: undefined,
    message: {
      messageId: crypto.randomUUID(), contextId: "", taskId: "", role: Role.ROLE_USER, metadata: undefined,
      extensions: [], referenceTaskIds: [], parts: [{ content: { $case: "data", value: data }, metadata: undefined, filename: "", mediaType: "" }],
    },
  };
}

// state names a task state as 0.3 does ("completed", "failed", ...).
function state(s) {
  if (legacy) return s;
  const name = typeof s === "number" ? taskStateToJSON(s) : String(s);
  return name.replace(/^TASK_STATE_/, "").toLowerCase().replace(/_/g, "-");
}

function partData(p) {
  if (legacy) return p.kind === "data" ? p.data : undefined;
  return p.content && p.content.$case === "data" ? p.content.value : undefined;
}

function partText(p) {
  if (legacy) return p.kind === "text" ? p.text : undefined;
  return p.content && p.content.$case === "text" ? p.content.value : undefined;
}

function view(task) {
  const msg = task.status && task.status.message;
  return {
    id: task.id,
    state: state(task.status.state),
    artifacts: (task.artifacts || []).map((a) => partData(a.parts[0])),
    statusText: msg ? msg.parts.map(partText).filter((t) => t !== undefined).join(" ") : "",
  };
}

async function awaitTerminal(client, id) {
  for (let i = 0; i < 600; i++) {
    const task = await client.getTask(legacy ? { id } : { tenant: "", id, historyLength: undefined });
    const v = view(task);
    if (["completed", "failed", "canceled", "rejected"].includes(v.state)) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("task " + id + " did not finish");
}

// kind tells a stream event apart, in either SDK's shape.
function streamed(ev) {
  if (legacy) {
    switch (ev.kind) {
      case "task": return { kind: "task", task: ev };
      case "status-update": return { kind: "status", state: ev.status.state };
      case "artifact-update": return { kind: "artifact", data: partData(ev.artifact.parts[0]) };
      default: return { kind: ev.kind };
    }
  }
  const p = ev.payload || ev;
  switch (p.$case) {
    case "task": return { kind: "task", task: p.value };
    case "statusUpdate": return { kind: "status", state: state(p.value.status.state) };
    case "artifactUpdate": return { kind: "artifact", data: partData(p.value.artifact.parts[0]) };
    default: return { kind: String(p.$case) };
  }
}

// streamTask sends data as a streamed message and returns the task's id,
// its last state, its artifacts and the kinds of the events seen; onTask
// is called with the task's id when the task arrives.
async function streamTask(client, data, onTask = () => {}) {
  const events = [];
  let id = "";
  let last = "";
  const artifacts = [];
  for await (const ev of client.sendMessageStream(message(data))) {
    const s = streamed(ev);
    events.push(s.kind);
    if (s.kind === "task") {
      const v = view(s.task);
      id = v.id;
      last = v.state;
      artifacts.push(...v.artifacts);
      onTask(id);
    } else if (s.kind === "artifact") {
      artifacts.push(s.data);
    } else if (s.kind === "status") {
      last = s.state;
    }
  }
  return { id, state: last, artifacts, events };
}

const out = {};
const t0 = Date.now();
const mark = (what) => process.env.A2A_DEBUG && process.stderr.write(`${Date.now() - t0}ms ${what}\n`);
try {
  const client = await factory(job.key).createFromUrl(job.base);
  if (job.mode === "live") {
    // Stream a command nobody processes yet; say READY <task id> on stderr
    // once the task is in, so that the test stores its event.
    out.streamed = await streamTask(client, job.stream, (id) => process.stderr.write("READY " + id + "\n"));
  } else if (job.mode === "get") {
    out.task = view(await client.getTask(legacy ? { id: job.taskId } : { tenant: "", id: job.taskId, historyLength: undefined }));
  } else {
    // The card needs no credentials.
    const card = await fetch(job.base + "/.well-known/agent-card.json");
    out.cardStatus = card.status;
    mark("card");

    // Every other call does.
    try {
      const anon = await factory("").createFromUrl(job.base);
      await anon.sendMessage(message(job.submit));
      out.anonymous = "accepted";
    } catch (e) {
      out.anonymous = String(e && e.message || e);
    }
    mark("anonymous");

    const sent = await client.sendMessage(message(job.submit));
    mark("sent");
    out.sentKind = legacy ? sent.kind : ("status" in sent ? "task" : "message");
    out.submitted = await awaitTerminal(client, sent.id);

    mark("submitted terminal");
    out.streamed = await streamTask(client, job.stream);

    mark("streamed");
    const rejected = await client.sendMessage(message(job.reject));
    out.rejected = await awaitTerminal(client, rejected.id);
  }
} catch (e) {
  out.error = String(e && e.stack || e);
}
// Exit once written: the fetch connection pool would keep node up for
// seconds.
process.stdout.write(JSON.stringify(out), () => process.exit(0));
