// A command's story: GET /traces/{id} as one timeline (the command, its
// events, each webhook delivery attempt, each push of an event to a live
// listener), read again at each of its events on the live stream (and
// once more a moment later, for the pushes of it that follow) and on a
// timer, so that it grows while the command, its deliveries and its
// pushes are in flight.
import { html, useEffect, useState } from './vendor/htm-preact.js';
import { call, follow, ApiError } from './api.js';
import { Json, Problem, time, useInterval } from './ui.js';

const DONE = ['processed', 'rejected'];

// What a push went to, by its transport.
const PUSHED_TO = { sse: 'an SSE stream', mcp: 'an MCP session', a2a: 'an A2A task stream' };

// pushesSettle is how long after an event its pushes on every replica are
// in the trace: the replicas tell each other every 100 ms.
const pushesSettle = 500;

function timeline(trace) {
  const items = [];
  const c = trace.command || {};
  items.push({ at: c.time, kind: 'command', title: `${c.type} command`, sub: `id ${c.id} from ${c.source}`, body: c });
  if (trace.status === 'rejected' || trace.rejection) {
    items.push({ at: trace.updatedAt, kind: 'rejected', title: 'Rejected',
      sub: trace.rejection ? `${trace.rejection.code}: ${trace.rejection.message}` : '', body: trace.rejection });
  }
  for (const ev of trace.events || []) {
    items.push({ at: ev.time, kind: 'event', title: ev.type, sub: `event ${ev.id}`, body: ev });
  }
  for (const d of trace.deliveries || []) {
    for (const [i, a] of (d.attempts || []).entries()) {
      const outcome = a.statusCode ? `HTTP ${a.statusCode}` : a.error || 'no answer';
      items.push({ at: a.at, kind: 'attempt', title: `Webhook attempt ${i + 1}: ${outcome}`,
        sub: `subscription ${d.subscriptionId}, ${d.eventType || d.eventId}, ${Number(a.latencyMs).toFixed(1)} ms, delivery ${d.status}`,
        excerpt: a.response, body: { ...a, subscriptionId: d.subscriptionId, eventId: d.eventId } });
    }
  }
  for (const p of trace.pushes || []) {
    items.push({ at: p.at, kind: 'push', title: `Pushed to ${PUSHED_TO[p.transport] || p.transport}`,
      sub: `${p.eventType || 'event'} ${p.eventId}, to ${p.listener}`, body: p });
  }
  const ms = (t) => (t ? Date.parse(t) : 0);
  return items.map((x, n) => ({ ...x, n })).sort((a, b) => ms(a.at) - ms(b.at) || a.n - b.n);
}

export function TraceView({ id }) {
  const [trace, setTrace] = useState(null);
  const [error, setError] = useState(null);
  const [open, setOpen] = useState({});
  const load = async () => {
    try {
      setTrace((await call('GET', `/traces/${encodeURIComponent(id)}`)).body);
      setError(null);
    } catch (err) {
      setError(err);
    }
  };
  const inFlight = !trace || !DONE.includes(trace.status) ||
    (trace.deliveries || []).some((d) => d.status === 'retrying' || d.status === 'pending');
  useEffect(() => {
    setTrace(null);
    load();
    const ctl = new AbortController();
    const later = new Set();
    follow([['correlationId', id], ['after', '0']], () => {
      load();
      const t = setTimeout(() => { later.delete(t); load(); }, pushesSettle);
      later.add(t);
    }, () => {}, ctl.signal);
    return () => { ctl.abort(); later.forEach(clearTimeout); };
  }, [id]);
  const notYet = error instanceof ApiError && error.code === 'TRACE_NOT_FOUND';
  // A command is found within moments of its 202; an id still unknown
  // after ten seconds is most likely wrong (or its trace has expired).
  const [since] = useState(() => Date.now());
  const lost = notYet && !trace && Date.now() - since > 10000;
  // Webhook deliveries go on after the command's outcome: the trace is read
  // every second while the command is in flight, every three after.
  const stopped = error && error.code !== 'TRACE_NOT_FOUND';
  useInterval(load, inFlight && !lost ? 1000 : 3000, !stopped);

  return html`<section aria-labelledby="trace-h">
    <h1 id="trace-h">Command <code>${id}</code></h1>
    ${notYet && !trace && !lost && html`<p role="status">No trace yet: waiting for the command…</p>`}
    ${lost && html`<${Problem} error=${error} />`}
    ${error && !notYet && html`<${Problem} error=${error} />`}
    ${trace && html`
      <p class="bar"><span class=${'status status-' + trace.status} data-status=${trace.status}>${trace.status}</span>
        ${inFlight ? html`<span class="state state-live">updating live</span>` : ''}
        <span class="hint">updated ${time(trace.updatedAt)}</span></p>
      <p>Validation: accepted (the envelope and its data matched the catalogue's schema)${trace.status === 'rejected' ? '; then rejected by its processor' : ''}.</p>
      <ol class="timeline" aria-label="Timeline">
        ${timeline(trace).map((x) => html`<li key=${x.n} class=${'tl tl-' + x.kind}>
          <button type="button" class="row" aria-expanded=${!!open[x.n]} onClick=${() => setOpen({ ...open, [x.n]: !open[x.n] })}>
            <span class="t">${time(x.at)}</span> <span class="kind">${x.kind}</span> <strong>${x.title}</strong> <span class="sub">${x.sub}</span>
          </button>
          ${x.excerpt && html`<pre class="excerpt" aria-label="Response excerpt">${x.excerpt}</pre>`}
          ${open[x.n] && html`<div class="detail"><${Json} value=${x.body} /></div>`}
        </li>`)}
      </ol>
      ${trace.pushesOmitted > 0 && html`<p class="hint">${trace.pushesOmitted} more pushes not kept.</p>`}
      <p class="hint">Pushes to live listeners are kept in memory for recent commands (the last 10,000 pushed, 32 each), not persisted.</p>`}
  </section>`;
}
