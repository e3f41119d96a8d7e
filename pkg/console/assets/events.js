// Live events: the log as it grows, over GET /events as Server-Sent
// Events, filtered by type and correlation id, paused at will, each event
// opened to its envelope.
import { html, useEffect, useState, useRef } from './vendor/htm-preact.js';
import { follow } from './api.js';
import { Json, Problem, time } from './ui.js';

const KEEP = 500;

export function EventsView() {
  const [types, setTypes] = useState('');
  const [corr, setCorr] = useState('');
  const [fromStart, setFromStart] = useState(false);
  const [filter, setFilter] = useState({ types: '', corr: '', fromStart: false });
  const [events, setEvents] = useState([]);
  const [held, setHeld] = useState([]);
  const [paused, setPaused] = useState(false);
  const [state, setState] = useState('connecting');
  const [open, setOpen] = useState({});
  const pausedRef = useRef(false);
  pausedRef.current = paused;

  useEffect(() => {
    setEvents([]);
    setHeld([]);
    const ctl = new AbortController();
    const q = [];
    for (const t of filter.types.split(/[\s,]+/).filter(Boolean)) q.push(['type', t]);
    if (filter.corr.trim()) q.push(['correlationId', filter.corr.trim()]);
    if (filter.fromStart) q.push(['after', '0']);
    const add = (ev, cursor) => {
      const item = { ev, cursor, key: cursor || ev.id };
      if (pausedRef.current) setHeld((h) => [...h, item].slice(-KEEP));
      else setEvents((list) => [item, ...list].slice(0, KEEP));
    };
    setState('connecting');
    follow(q, add, setState, ctl.signal);
    return () => ctl.abort();
  }, [filter]);

  const resume = () => {
    setPaused(false);
    setEvents((list) => [...held.slice().reverse(), ...list].slice(0, KEEP));
    setHeld([]);
  };
  const apply = (e) => {
    e.preventDefault();
    setFilter({ types, corr, fromStart });
  };
  const status = typeof state === 'string' ? state : 'stopped';
  return html`<section aria-labelledby="events-h">
    <h1 id="events-h">Live events</h1>
    <form class="filters" onSubmit=${apply} aria-label="Filter events">
      <label for="f-type">Types</label>
      <input id="f-type" name="type" placeholder="OrderPlaced, OrderCancelled" value=${types} onInput=${(e) => setTypes(e.target.value)} />
      <label for="f-corr">Correlation id</label>
      <input id="f-corr" name="correlationId" value=${corr} onInput=${(e) => setCorr(e.target.value)} />
      <label class="check"><input type="checkbox" checked=${fromStart} onChange=${(e) => setFromStart(e.target.checked)} /> from the log's start</label>
      <button type="submit">Apply</button>
    </form>
    <p class="bar">
      <span class=${'state state-' + status} role="status" data-state=${status}>${status}</span>
      ${paused
        ? html`<button type="button" onClick=${resume}>Resume${held.length ? ` (${held.length} new)` : ''}</button>`
        : html`<button type="button" onClick=${() => setPaused(true)}>Pause</button>`}
      <button type="button" onClick=${() => setEvents([])}>Clear</button>
    </p>
    ${typeof state !== 'string' && html`<${Problem} error=${state} />`}
    ${events.length === 0
      ? html`<p class="empty">No events yet${filter.fromStart ? '' : ': new events appear here as they are appended'}.</p>`
      : html`<ol class="events" aria-label="Events">${events.map(({ ev, cursor, key }) => html`<li key=${key} class="event">
          <button type="button" class="row" aria-expanded=${!!open[key]} onClick=${() => setOpen({ ...open, [key]: !open[key] })}>
            <span class="t">${time(ev.time)}</span> <span class="type">${ev.type}</span> <span class="id">${ev.id}</span>
          </button>
          ${open[key] && html`<div class="detail"><p>cursor <code>${cursor}</code></p><${Json} value=${ev} /></div>`}
        </li>`)}</ol>`}
  </section>`;
}
