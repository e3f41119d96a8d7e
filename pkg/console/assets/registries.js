// The catalogue and the registries: agents, services, subscriptions. Each
// action is one operation of the API; its buttons are shown only to a
// session with the operation's scope.
import { html, useState } from './vendor/htm-preact.js';
import { call, get, uuid, ApiError } from './api.js';
import { can, go, Json, Problem, useLoad, time } from './ui.js';

// useAct returns act, which runs an operation and reads the registry again,
// and the outcome of the last one, to show.
function useAct(reload) {
  const [error, setError] = useState(null);
  const [note, setNote] = useState('');
  const act = async (label, method, path, body) => {
    setError(null);
    setNote('');
    try {
      const r = await call(method, path, body);
      setNote(`${label}: ${r.status === 202 ? 'accepted' : 'done'} (${r.status})`);
      // A change sent as a command shows in the registry once processed.
      reload();
      setTimeout(reload, 1000);
      return r;
    } catch (err) {
      setError(err);
      return null;
    }
  };
  return [act, html`<${Problem} error=${error} />${note && html`<p role="status" class="note">${note}</p>`}`, setError];
}

function Schema({ kind, entry }) {
  const [doc, err] = useLoad(() => get(`/${kind}/${encodeURIComponent(entry.schema)}/${encodeURIComponent(entry.version)}`), [entry.dataschema]);
  return html`<div class="detail"><${Problem} error=${err} />${doc && html`<${Json} value=${doc} />`}</div>`;
}

export function CatalogView() {
  const [cmds, e1] = useLoad(() => get('/commands'));
  const [evs, e2] = useLoad(() => get('/events?view=catalog'));
  const [open, setOpen] = useState('');
  const list = (kind, entries) => html`<ul class="catalog">${(entries || []).map((e) => {
    const k = kind + e.dataschema;
    return html`<li key=${k}><button type="button" class="row" aria-expanded=${open === k} onClick=${() => setOpen(open === k ? '' : k)}>
      <strong>${e.type}</strong> <span class="version">${e.version}</span> <span class="sub">${e.description}</span></button>
      ${open === k && html`<${Schema} kind=${kind} entry=${e} />`}</li>`;
  })}</ul>`;
  return html`<section aria-labelledby="cat-h"><h1 id="cat-h">Catalogue</h1>
    <${Problem} error=${e1 || e2} />
    <h2>Commands</h2>${cmds && list('commands', cmds.commands)}
    <h2>Events</h2>${evs && list('events', evs.events)}</section>`;
}

export function AgentsView() {
  const [data, err, reload] = useLoad(() => get('/agents?limit=100'));
  const [act, outcome] = useAct(reload);
  const [detail, setDetail] = useState(null);
  const write = can('write');
  const show = async (id) => setDetail(detail && detail.id === id ? null : await get(`/agents/${encodeURIComponent(id)}`).catch(() => null));
  return html`<section aria-labelledby="agents-h"><h1 id="agents-h">Agents</h1>
    <${Problem} error=${err} />${outcome}
    ${data && (data.agents.length === 0 ? html`<p class="empty">No agents registered.</p>` : html`<table>
      <thead><tr><th scope="col">Id</th><th scope="col">Name</th><th scope="col">Accepts</th><th scope="col">Status</th><th scope="col">Actions</th></tr></thead>
      <tbody>${data.agents.map((a) => html`<tr key=${a.id}>
        <td><button type="button" class="link" onClick=${() => show(a.id)}>${a.id}</button></td><td>${a.name}</td>
        <td>${(a.accepts || []).join(', ')}</td><td>${a.status}${a.error ? ` (${a.error})` : ''}</td>
        <td>${write && html`
          ${a.status === 'paused'
            ? html`<button type="button" onClick=${() => act(`Resume ${a.id}`, 'POST', `/agents/${encodeURIComponent(a.id)}/resume`)}>Resume</button>`
            : html`<button type="button" onClick=${() => act(`Pause ${a.id}`, 'POST', `/agents/${encodeURIComponent(a.id)}/pause`)}>Pause</button>`}
          <button type="button" class="danger" onClick=${() => confirm(`Delete agent ${a.id}?`) && act(`Delete ${a.id}`, 'DELETE', `/agents/${encodeURIComponent(a.id)}`)}>Delete</button>`}</td>
      </tr>`)}</tbody></table>`)}
    ${detail && html`<h2>Agent ${detail.id}</h2>
      ${detail.pending && html`<p class="pending" role="status">Pending: ${detail.pending.commands} command${detail.pending.commands === 1 ? '' : 's'} waiting
        for the agent${detail.status === 'paused' ? ' (held while it is paused)' : ''}, ${detail.pending.inFlight} delivered and not yet acknowledged.</p>`}
      <${Json} value=${detail} />`}
  </section>`;
}

export function ServicesView() {
  const [data, err, reload] = useLoad(() => get('/services?limit=100'));
  const [act, outcome] = useAct(reload);
  const write = can('write');
  return html`<section aria-labelledby="services-h"><h1 id="services-h">Services</h1>
    <${Problem} error=${err} />${outcome}
    ${data && (data.services.length === 0 ? html`<p class="empty">No services registered.</p>` : html`<table>
      <thead><tr><th scope="col">Id</th><th scope="col">Name</th><th scope="col">Accepts</th><th scope="col">Produces</th><th scope="col">Actions</th></tr></thead>
      <tbody>${data.services.map((s) => html`<tr key=${s.id}><td>${s.id}</td><td>${s.name}</td>
        <td>${(s.accepts || []).join(', ')}</td><td>${(s.produces || []).join(', ')}</td>
        <td>${write && html`<button type="button" class="danger"
          onClick=${() => confirm(`Delete service ${s.id}?`) && act(`Delete ${s.id}`, 'DELETE', `/services/${encodeURIComponent(s.id)}`)}>Delete</button>`}</td>
      </tr>`)}</tbody></table>`)}
  </section>`;
}

function Deliveries({ id }) {
  const [data, err] = useLoad(() => get(`/subscriptions/${encodeURIComponent(id)}/deliveries`), [id]);
  return html`<div class="detail"><h3>Deliveries</h3><${Problem} error=${err} />
    ${data && (data.deliveries.length === 0 ? html`<p class="empty">No deliveries kept.</p>` : html`<ul>${data.deliveries.map((d) => html`<li key=${d.cursor}>
      <strong>${d.eventType || d.eventId}</strong> ${d.status}${d.correlationId && html` — <a href=${'traces/' + encodeURIComponent(d.correlationId)}
        onClick=${(e) => { e.preventDefault(); go('traces/' + encodeURIComponent(d.correlationId)); }}>story</a>`}
      <ul>${(d.attempts || []).map((a, i) => html`<li key=${i}>${time(a.at)}: ${a.statusCode ? 'HTTP ' + a.statusCode : a.error}, ${Math.round(a.latencyMs)} ms
        ${a.response && html`<pre class="excerpt">${a.response}</pre>`}</li>`)}</ul></li>`)}</ul>`)}</div>`;
}

export function SubscriptionsView() {
  const [data, err, reload] = useLoad(() => get('/subscriptions?limit=100'));
  const [act, outcome, setError] = useAct(reload);
  const [url, setUrl] = useState('');
  const [types, setTypes] = useState('');
  const [secret, setSecret] = useState({});
  const [open, setOpen] = useState('');
  const [replay, setReplay] = useState({});
  const write = can('write');
  const admin = can('admin');
  const create = async (e) => {
    e.preventDefault();
    const body = { webhook: { url } };
    const t = types.split(/[\s,]+/).filter(Boolean);
    if (t.length) body.filter = { types: t };
    if (await act('Create', 'POST', '/subscriptions', body)) {
      setUrl('');
      setTypes('');
    }
  };
  const reveal = async (id) => {
    if (secret[id]) return setSecret({ ...secret, [id]: '' });
    try {
      const r = await call('GET', `/subscriptions/${encodeURIComponent(id)}/secret`);
      setSecret({ ...secret, [id]: r.body.secret });
    } catch (err2) {
      setError(err2);
    }
  };
  const disable = (id) => act(`Disable ${id}`, 'POST', '/commands', {
    specversion: '1.0', id: uuid(), source: 'agentbus-console', type: 'DisableSubscription', dataschema: 'disable-subscription/1.0',
    datacontenttype: 'application/json', time: new Date().toISOString(), data: { id, reason: 'disabled from the console' } });
  const doReplay = (id) => {
    const v = (replay[id] || '').trim();
    if (!v) return setError(new ApiError(400, { error: { code: 'VALIDATION_FAILED', message: 'a time (RFC 3339) or a cursor (0 for the start) to replay from' } }));
    const body = /^\d{4}-\d{2}-\d{2}T/.test(v) ? { since: v } : { after: v };
    return act(`Replay ${id}`, 'POST', `/subscriptions/${encodeURIComponent(id)}/replay`, body);
  };
  const sid = (id) => encodeURIComponent(id);
  return html`<section aria-labelledby="subs-h"><h1 id="subs-h">Subscriptions</h1>
    <${Problem} error=${err} />${outcome}
    ${write && html`<form class="filters" onSubmit=${create} aria-label="Create a subscription">
      <label for="sub-url">Webhook URL</label><input id="sub-url" type="url" required value=${url} onInput=${(e) => setUrl(e.target.value)} />
      <label for="sub-types">Event types</label><input id="sub-types" placeholder="all" value=${types} onInput=${(e) => setTypes(e.target.value)} />
      <button type="submit">Create</button></form>`}
    ${data && (data.subscriptions.length === 0 ? html`<p class="empty">No subscriptions.</p>` : html`<ul class="subs">
      ${data.subscriptions.map((s) => html`<li key=${s.id} class="sub">
        <p><strong>${s.id}</strong> → <code>${s.webhook && s.webhook.url}</code> <span class=${'status status-' + s.status}>${s.status}</span>
          ${s.statusReason && html` (${s.statusReason})`} ${s.filter && s.filter.types ? `types: ${s.filter.types.join(', ')}` : 'all types'}</p>
        <p class="actions">
          <button type="button" aria-expanded=${open === s.id} onClick=${() => setOpen(open === s.id ? '' : s.id)}>Attempts</button>
          ${write && html`
            <button type="button" onClick=${() => reveal(s.id)}>${secret[s.id] ? 'Hide secret' : 'Reveal secret'}</button>
            <button type="button" onClick=${() => act(`Rotate ${s.id}`, 'POST', `/subscriptions/${sid(s.id)}/secret`, {})}>Rotate secret</button>
            ${s.status === 'active'
              ? html`<button type="button" onClick=${() => disable(s.id)}>Disable</button>`
              : html`<button type="button" onClick=${() => act(`Enable ${s.id}`, 'POST', `/subscriptions/${sid(s.id)}/enable`)}>Enable</button>`}
            <button type="button" class="danger" onClick=${() => confirm(`Delete subscription ${s.id}?`) && act(`Delete ${s.id}`, 'DELETE', `/subscriptions/${sid(s.id)}`)}>Delete</button>`}
          ${admin && html`
            <button type="button" onClick=${() => act(`Redeliver ${s.id}`, 'POST', `/subscriptions/${sid(s.id)}/redeliver`)}>Redeliver dead letters</button>
            <label for=${'replay-' + s.id}>Replay from</label>
            <input id=${'replay-' + s.id} placeholder="2026-01-01T00:00:00Z or a cursor" value=${replay[s.id] || ''}
              onInput=${(e) => setReplay({ ...replay, [s.id]: e.target.value })} />
            <button type="button" onClick=${() => doReplay(s.id)}>Replay</button>`}
        </p>
        ${secret[s.id] && html`<p>Signing secret: <code class="secret">${secret[s.id]}</code></p>`}
        ${open === s.id && html`<${Deliveries} id=${s.id} />`}
      </li>`)}</ul>`)}
  </section>`;
}
