// The console application: sign-in, then the views, each on the REST API
// (api.js). Routes are paths below the console's base, kept in history.
import { html, render, useState, useEffect } from './vendor/htm-preact.js';
import { Link, can } from './ui.js';
import { BASE, ROOT, TENANT, session, onUnauthorized, manifest, token, call, ApiError } from './api.js';
import { EventsView } from './events.js';
import { TraceView } from './trace.js';
import { SendView } from './send.js';
import { CatalogView, AgentsView, ServicesView, SubscriptionsView } from './registries.js';

function route() {
  const p = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : '';
  return p.replace(/\/+$/, '');
}

// scopesOfKey asks the API which scopes an API key has, by requests that
// change nothing: a command with no envelope (write) and a redelivery of
// a subscription that does not exist (admin). A scope missing is 403; a
// scope held gets the request refused for what it is (400, 404).
async function scopesOfKey() {
  const scopes = ['read'];
  const probe = async (method, path, body) => {
    try {
      await call(method, path, body);
      return true;
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      if (err.status === 401) throw err;
      return err.status !== 403;
    }
  };
  if (await probe('POST', '/commands', {})) scopes.push('write');
  if (await probe('POST', '/subscriptions/console-scope-probe/redeliver')) scopes.push('admin');
  return scopes;
}

function SignIn({ auth, onDone, notice }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const k = key.trim();
      if (auth.type === 'bearer') {
        const t = await token(auth.tokenUrl, k);
        session.set({ method: 'bearer', header: 'Authorization', value: `Bearer ${t.access_token}`,
          scopes: (t.scope || 'read').split(' ') });
      } else {
        session.set({ method: 'apiKey', header: auth.scheme, value: k, scopes: ['read'], pending: true });
        await call('GET', '/commands');
        const scopes = await scopesOfKey();
        session.set({ method: 'apiKey', header: auth.scheme, value: k, scopes });
      }
      setKey('');
      onDone();
    } catch (err) {
      session.clear();
      setError(err.code ? `${err.code}: ${err.message}` : String(err.message || err));
    } finally {
      setBusy(false);
    }
  };
  if (auth.type === 'apiKey' && auth.in === 'query') {
    return html`<main class="signin"><h1>agentbus console</h1>
      <p role="alert">This agentbus takes API keys in the query string (apikey-query); the console keeps keys out of
      URLs, so it cannot sign in. Use --auth apikey-header or bearer to use the console.</p></main>`;
  }
  return html`<main class="signin">
    <h1>agentbus console</h1>
    ${notice && html`<p class="notice" role="status">${notice}</p>`}
    <form onSubmit=${submit} aria-label="Sign in">
      <label for="signin-key">API key</label>
      <input id="signin-key" name="key" type="password" autocomplete="off" required value=${key}
        onInput=${(e) => setKey(e.target.value)} />
      <p class="hint">${auth.type === 'bearer'
        ? 'The key is exchanged for a bearer token at the token endpoint; the token is kept in this tab only.'
        : 'The key is kept in this tab only (sessionStorage), sent in the ' + auth.scheme + ' header.'}</p>
      <button type="submit" disabled=${busy}>Sign in</button>
      ${error && html`<p class="error" role="alert">${error}</p>`}
    </form>
  </main>`;
}

// TenantSwitch, in multi-tenant mode, opens another tenant's console (the
// same view) for a key valid for several tenants; the session, kept per
// origin, goes with it, and the API checks the tenant of every call.
function TenantSwitch({ path }) {
  const current = TENANT;
  const [t, setT] = useState(current);
  const [bad, setBad] = useState(false);
  const submit = (e) => {
    e.preventDefault();
    const next = t.trim();
    if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(next)) {
      setBad(true);
      return;
    }
    if (next !== current) location.assign(`${ROOT}/${next}/console/${path}`);
  };
  return html`<form class="tenant" onSubmit=${submit} aria-label="Tenant">
    <label for="tenant-id">Tenant</label>
    <input id="tenant-id" size="12" value=${t} aria-invalid=${bad ? 'true' : undefined} onInput=${(e) => { setT(e.target.value); setBad(false); }} />
    <button type="submit">Switch</button></form>`;
}

const VIEWS = [
  ['', 'Live events'],
  ['send', 'Send a command'],
  ['catalog', 'Catalogue'],
  ['agents', 'Agents'],
  ['services', 'Services'],
  ['subscriptions', 'Subscriptions'],
];

function Shell({ path, auth, signOut }) {
  const top = path.split('/')[0];
  let view;
  if (top === 'traces' && path.split('/')[1]) view = html`<${TraceView} key=${path} id=${decodeURIComponent(path.split("/")[1])} />`;
  else if (top === 'send') view = html`<${SendView} />`;
  else if (top === 'catalog') view = html`<${CatalogView} />`;
  else if (top === 'agents') view = html`<${AgentsView} />`;
  else if (top === 'services') view = html`<${ServicesView} />`;
  else if (top === 'subscriptions') view = html`<${SubscriptionsView} />`;
  else view = html`<${EventsView} />`;
  const s = session.get();
  return html`<header>
      <span class="brand">agentbus</span>
      ${TENANT && html`<${TenantSwitch} path=${path} />`}
      <nav aria-label="Views"><ul>
        ${VIEWS.filter(([r]) => r !== 'send' || can('write')).map(([r, label]) => html`<li>
          <${Link} to=${r} aria-current=${top === r ? 'page' : undefined}>${label}<//></li>`)}
      </ul></nav>
      <span class="who"><span class="scopes" aria-label="Scopes">${s ? s.scopes.join(' ') : ''}</span>
        ${auth.type !== 'none' && html`<button type="button" class="link" onClick=${signOut}>Sign out</button>`}</span>
    </header>
    <main>${view}</main>`;
}

function App() {
  const [auth, setAuth] = useState(null);
  const [error, setError] = useState('');
  const [signedIn, setSignedIn] = useState(!!session.get());
  const [notice, setNotice] = useState('');
  const [path, setPath] = useState(route());
  useEffect(() => {
    const pop = () => setPath(route());
    addEventListener('popstate', pop);
    onUnauthorized(() => {
      setNotice('Your session ended (the key was revoked or the token expired): sign in again.');
      setSignedIn(false);
    });
    manifest().then((m) => {
      const a = m.authentication || { type: 'none' };
      if (!m.authentication || a.type === 'none') {
        session.set({ method: 'none', header: '', value: '', scopes: ['read', 'write', 'admin'] });
        setSignedIn(true);
      }
      setAuth(a.type ? a : { type: 'none' });
    }).catch((err) => setError(`The manifest could not be read: ${err.message}`));
    return () => removeEventListener('popstate', pop);
  }, []);
  if (error) return html`<main><p class="error" role="alert">${error}</p></main>`;
  if (!auth) return html`<main><p>Loading…</p></main>`;
  if (!signedIn || !session.get()) {
    return html`<${SignIn} auth=${auth} notice=${notice} onDone=${() => { setNotice(''); setSignedIn(true); }} />`;
  }
  const signOut = () => {
    session.clear();
    setNotice('');
    setSignedIn(false);
  };
  return html`<${Shell} key=${session.get().value} path=${path} auth=${auth} signOut=${signOut} />`;
}

render(html`<${App} />`, document.getElementById('app'));
