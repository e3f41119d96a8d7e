// The console's one way to agentbus: its REST API, on the origin that
// served the console, with the credential kept in this tab's
// sessionStorage. Nothing here writes a credential into a URL or a cookie.

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;

/** The console's base path ("/console/" or "/{tenantId}/console/"). */
export const BASE = meta('agentbus-console');
/** The API's base path ("" or "/{tenantId}", below ROOT). */
export const API = meta('agentbus-api');
/** The path agentbus is served under ("" or a proxy's path, e.g. "/agentbus"). */
export const ROOT = meta('agentbus-root');
/** The tenant whose console this is ("" in single-tenant mode). */
export const TENANT = meta('agentbus-tenant');

const KEY = 'agentbus-console-session';

/** The signed-in session: {header, value, scopes: [..], method, pending}
 * or null; pending while a key is tried at sign-in. */
export const session = {
  get() {
    try {
      return JSON.parse(sessionStorage.getItem(KEY));
    } catch {
      return null;
    }
  },
  set(s) { sessionStorage.setItem(KEY, JSON.stringify(s)); },
  clear() { sessionStorage.removeItem(KEY); },
};

/** An answer of the API that is not 2xx: status, code, message, details. */
export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || `HTTP_${status}`;
    this.details = e.details || {};
  }
  get violations() { return this.details.violations || []; }
}

let unauthorized = () => {};
/** onUnauthorized sets what a 401 from any call does (show the sign-in). */
export function onUnauthorized(f) { unauthorized = f; }

function headers(extra = {}) {
  const h = { Accept: 'application/json', ...extra };
  const s = session.get();
  if (s && s.header) h[s.header] = s.value;
  return h;
}

async function answer(res) {
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (res.status === 401) {
    const s = session.get();
    session.clear();
    if (s && !s.pending) unauthorized(); // a key being tried at sign-in is not a session that ended
  }
  if (!res.ok) throw new ApiError(res.status, body);
  return { status: res.status, body, headers: res.headers };
}

/** call sends one request to the API (path below its base) and returns
 * {status, body, headers}; a status not 2xx throws an ApiError. */
export async function call(method, path, body) {
  const init = { method, headers: headers(), credentials: 'omit', cache: 'no-store', redirect: 'error' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  return answer(await fetch(API + path, init));
}

/** get returns the body of a GET. */
export const get = async (path) => (await call('GET', path)).body;

/** manifest returns the discovery manifest (the tenant's, in multi-tenant
 * mode); it needs no credentials. */
export async function manifest() {
  const res = await fetch(API + '/.well-known/agentproto', { credentials: 'omit', cache: 'no-store' });
  return (await answer(res)).body;
}

/** token exchanges an API key for a bearer token at the manifest's token
 * URL (its path, on this origin): {access_token, scope, expires_in}. */
export async function token(tokenUrl, key) {
  const path = new URL(tokenUrl, location.href).pathname;
  const form = new URLSearchParams({ grant_type: 'client_credentials', client_secret: key });
  const res = await fetch(path, {
    method: 'POST', credentials: 'omit', cache: 'no-store',
    headers: { Accept: 'application/json', 'Content-Type': 'application/x-www-form-urlencoded' }, body: form,
  });
  const text = await res.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!res.ok) {
    // The token endpoint answers in OAuth's form: {error, error_description}.
    const oauth = body && typeof body.error === 'string';
    throw new ApiError(res.status, oauth ? { error: { code: body.error, message: body.error_description || body.error } } : body);
  }
  return body;
}

/** follow reads GET /events as Server-Sent Events (fetch, so that the
 * credential goes in a header) with the query q, handing each event and
 * its cursor to onEvent, and reconnects after a broken stream with
 * Last-Event-ID, until signal aborts. onState gets "live", "reconnecting"
 * or an ApiError. */
export async function follow(q, onEvent, onState, signal) {
  let last = null;
  while (!signal.aborted) {
    try {
      const h = headers({ Accept: 'text/event-stream' });
      if (last) h['Last-Event-ID'] = last;
      const qs = new URLSearchParams(q);
      if (last) qs.delete('after');
      const res = await fetch(`${API}/events?${qs}`, { headers: h, credentials: 'omit', cache: 'no-store', signal });
      if (!res.ok) {
        await answer(res);
      }
      onState('live');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut).replace(/^\r?\n\r?\n/, '');
          let id = null;
          const data = [];
          for (const line of block.split(/\r?\n/)) {
            if (line.startsWith('id:')) id = line.slice(3).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          }
          if (data.length === 0) continue;
          if (id) last = id;
          try {
            onEvent(JSON.parse(data.join('\n')), id);
          } catch {
            // not an event envelope: skipped
          }
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError) {
        onState(err);
        if (err.status === 401 || err.status === 403 || err.status === 400) return;
      }
    }
    if (signal.aborted) return;
    onState('reconnecting');
    await new Promise((r) => setTimeout(r, 2000));
  }
}

/** uuid returns a random UUID (version 4). */
export function uuid() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
