// What the views share: links between routes, the session's scopes, small
// pieces of the page.
import { html, useEffect, useRef, useState } from './vendor/htm-preact.js';
import { BASE, session } from './api.js';

/** go opens a route of the console (a path below its base). */
export function go(route) {
  history.pushState(null, '', BASE + route);
  dispatchEvent(new Event('popstate'));
}

/** Link is a link to a route of the console, opened without a reload. */
export function Link({ to, children, ...rest }) {
  const click = (e) => {
    if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    go(to);
  };
  return html`<a href=${BASE + to} onClick=${click} ...${rest}>${children}</a>`;
}

/** can reports whether the session's scopes include scope. */
export const can = (scope) => {
  const s = session.get();
  return !!s && s.scopes.includes(scope);
};

/** useInterval runs f every ms while the component lives (and when on). */
export function useInterval(f, ms, on = true) {
  const ref = useRef(f);
  ref.current = f;
  useEffect(() => {
    if (!on) return undefined;
    const t = setInterval(() => ref.current(), ms);
    return () => clearInterval(t);
  }, [ms, on]);
}

/** Json shows a value as indented JSON. */
export const Json = ({ value }) => html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;

/** Problem shows an error of the API: its code, message and violations. */
export function Problem({ error }) {
  if (!error) return null;
  const v = error.violations || [];
  return html`<div class="error" role="alert"><strong>${error.code || 'Error'}</strong>: ${error.message}
    ${v.length > 0 && html`<ul>${v.map((x) => html`<li><code>${x.path}</code>: ${x.message}</li>`)}</ul>`}</div>`;
}

/** useLoad runs load (an async function) now and whenever deps change,
 * and returns [value, error, reload]. */
export function useLoad(load, deps = []) {
  const [state, setState] = useState({ value: null, error: null });
  const [n, setN] = useState(0);
  useEffect(() => {
    let live = true;
    load().then((value) => live && setState({ value, error: null }), (error) => live && setState({ value: null, error }));
    return () => { live = false; };
  }, [...deps, n]);
  return [state.value, state.error, () => setN((x) => x + 1)];
}

/** time shows an RFC 3339 time as local time with milliseconds. */
export function time(t) {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d)) return t;
  return d.toLocaleTimeString(undefined, { hour12: false }) + '.' + String(d.getMilliseconds()).padStart(3, '0');
}
