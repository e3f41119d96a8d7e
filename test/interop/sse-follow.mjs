// Follows an agentbus live event stream with the eventsource package, as a
// browser's EventSource would, and prints what it saw as JSON on stdout.
//
// usage: node sse-follow.mjs URL TOKEN COUNT CUT
//   TOKEN  a bearer token, or "" for none
//   COUNT  how many events to collect before closing
//   CUT    after this many events the first connection is cut, as a
//          network failure would; EventSource then reconnects on its own,
//          sending Last-Event-ID
import { EventSource } from "eventsource";

const [url, token, count, cut] = process.argv.slice(2);
const want = Number(count);
const cutAt = Number(cut);
const requests = []; // the Last-Event-ID of each connection ("" for none)

// fetchCutting passes every request on to fetch with the credential, and
// ends the first response's body after cutAt events.
async function fetchCutting(input, init) {
  const headers = { ...init.headers };
  if (token) headers.Authorization = `Bearer ${token}`;
  requests.push(headers["Last-Event-ID"] ?? headers["last-event-id"] ?? "");
  const res = await fetch(input, { ...init, headers });
  if (requests.length > 1 || !res.body) return res;
  let seen = 0;
  let text = "";
  const reader = res.body.getReader();
  const encoder = new TextEncoder();
  const body = new ReadableStream({
    async pull(ctl) {
      const { value, done } = await reader.read();
      if (done) return ctl.close();
      text += new TextDecoder().decode(value);
      // Pass on whole messages only, up to the cut.
      let end;
      while ((end = text.indexOf("\n\n")) >= 0) {
        const message = text.slice(0, end + 2);
        text = text.slice(end + 2);
        ctl.enqueue(encoder.encode(message));
        if (message.includes("data: ") && ++seen >= cutAt) {
          reader.cancel();
          ctl.close();
          return;
        }
      }
    },
  });
  return new Response(body, { status: res.status, headers: res.headers });
}

const events = [];
const es = new EventSource(url, { fetch: fetchCutting });
const timer = setTimeout(() => finish("timed out"), 60_000);
es.onmessage = (e) => {
  events.push({ id: e.lastEventId, envelopeId: JSON.parse(e.data).id });
  if (events.length >= want) finish("");
};
es.onerror = (e) => {
  if (e.code && e.code >= 400) finish(`status ${e.code}: ${e.message}`);
};

function finish(error) {
  clearTimeout(timer);
  es.close();
  process.stdout.write(JSON.stringify({ error, requests, events }) + "\n");
  process.exit(0);
}
