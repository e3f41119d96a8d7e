// Send a command: a form generated from the catalogue's JSON Schema of the
// chosen type and version (GET /commands, GET /commands/{schema}/{version}),
// its examples offered; the API's violations shown at their fields; the
// command's story opened once it is queued.
import { html, useEffect, useState } from './vendor/htm-preact.js';
import { call, get, uuid, ApiError } from './api.js';
import { can, go, Problem, useLoad } from './ui.js';

const isObject = (s) => s && (s.type === 'object' || s.properties);

// initial returns the form's value for a schema: its default, else empty.
function initial(s) {
  if (!s) return '';
  if (s.default !== undefined) return s.default;
  if (isObject(s)) return Object.fromEntries(Object.entries(s.properties || {}).map(([k, v]) => [k, initial(v)]));
  if (s.type === 'array') return [];
  if (s.type === 'boolean') return false;
  return '';
}

// clean drops what was left empty, so that the API names a missing field
// as missing rather than as an empty string.
function clean(v) {
  if (Array.isArray(v)) return v.map(clean);
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      const c = clean(x);
      if (c !== '' && c !== undefined) out[k] = c;
    }
    return out;
  }
  return v;
}

// check returns the violations of v against the parts of schema s the
// form can tell before sending (required, type, enum, lengths, pattern,
// bounds, item counts), each at its JSON path. The API's check, on
// sending, is the one that counts; this one only tells early.
function check(s, v, path, out = []) {
  if (!s || v === '' || v === undefined) return out; // a missing value is its parent's concern (required)
  const bad = (message) => out.push({ path, message });
  if (isObject(s)) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return bad('must be an object'), out;
    for (const k of s.required || []) {
      if (v[k] === undefined || v[k] === '') out.push({ path: `${path}.${k}`, message: `${k} is required` });
    }
    for (const [k, sub] of Object.entries(s.properties || {})) check(sub, v[k], `${path}.${k}`, out);
    return out;
  }
  if (s.type === 'array') {
    if (!Array.isArray(v)) return bad('must be an array'), out;
    if (s.minItems !== undefined && v.length < s.minItems) bad(`must have at least ${s.minItems} item${s.minItems === 1 ? '' : 's'}`);
    if (s.maxItems !== undefined && v.length > s.maxItems) bad(`must have at most ${s.maxItems} items`);
    v.forEach((x, i) => check(s.items, x, `${path}[${i}]`, out));
    return out;
  }
  if (Array.isArray(s.enum) && !s.enum.includes(v)) bad(`must be one of ${s.enum.join(', ')}`);
  if (s.type === 'string') {
    if (typeof v !== 'string') return bad('must be a string'), out;
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) bad(`must be at least ${s.minLength} characters long`);
    if (s.maxLength !== undefined && n > s.maxLength) bad(`must be at most ${s.maxLength} characters long`);
    if (s.pattern) {
      try {
        if (!new RegExp(s.pattern, 'u').test(v)) bad(`must match ${s.pattern}`);
      } catch {
        // a pattern this browser cannot read: left to the API
      }
    }
  }
  if (s.type === 'integer' && !Number.isInteger(v)) bad('must be an integer');
  if ((s.type === 'integer' || s.type === 'number') && typeof v === 'number') {
    if (s.minimum !== undefined && v < s.minimum) bad(`must be at least ${s.minimum}`);
    if (s.maximum !== undefined && v > s.maximum) bad(`must be at most ${s.maximum}`);
  }
  return out;
}

// Field is the input for the value at path (a JSON path below $.data) of
// schema s; errs maps paths to the API's messages.
function Field({ s, name, path, value, set, errs, required }) {
  const id = 'fld-' + path.replace(/^\$\./, '').replace(/[^A-Za-z0-9]+/g, '-');
  const msgs = errs[path] || [];
  const label = html`<label for=${id}>${name}${required ? html` <span class="req" aria-label="required">*</span>` : ''}</label>`;
  const help = html`${s.description && html`<p class="hint" id=${id + '-d'}>${s.description}</p>`}
    ${msgs.map((m) => html`<p class="error violation" data-path=${path}>${m}</p>`)}`;
  const describedBy = s.description ? id + '-d' : undefined;
  const invalid = msgs.length > 0 ? 'true' : undefined;
  if (isObject(s)) {
    const req = s.required || [];
    return html`<fieldset><legend>${name}</legend>${help}
      ${Object.entries(s.properties || {}).map(([k, sub]) => html`<${Field} key=${k} s=${sub} name=${k} path=${path + '.' + k}
        value=${(value || {})[k]} set=${(v) => set({ ...(value || {}), [k]: v })} errs=${errs} required=${req.includes(k)} />`)}
    </fieldset>`;
  }
  if (s.type === 'array') {
    const list = Array.isArray(value) ? value : [];
    const it = s.items || { type: 'string' };
    return html`<fieldset><legend>${name}</legend>${help}
      ${list.map((v, i) => html`<div class="item" key=${i}>
        <${Field} s=${it} name=${`${name} ${i + 1}`} path=${`${path}[${i}]`} value=${v} errs=${errs}
          set=${(x) => set(list.map((y, j) => (j === i ? x : y)))} />
        <button type="button" onClick=${() => set(list.filter((_, j) => j !== i))}>Remove ${name} ${i + 1}</button></div>`)}
      <button type="button" onClick=${() => set([...list, initial(it)])}>Add to ${name}</button>
    </fieldset>`;
  }
  if (Array.isArray(s.enum)) {
    return html`<div class="field">${label}<select id=${id} aria-invalid=${invalid} aria-describedby=${describedBy}
        onChange=${(e) => set(s.enum[e.target.selectedIndex - 1] ?? '')}>
      <option value="">—</option>${s.enum.map((v) => html`<option value=${String(v)} selected=${v === value}>${String(v)}</option>`)}</select>${help}</div>`;
  }
  if (s.type === 'boolean') {
    return html`<div class="field check"><input id=${id} type="checkbox" checked=${!!value} aria-describedby=${describedBy}
      onChange=${(e) => set(e.target.checked)} />${label}${help}</div>`;
  }
  if (s.type === 'integer' || s.type === 'number') {
    return html`<div class="field">${label}<input id=${id} type="number" step=${s.type === 'integer' ? 1 : 'any'}
      value=${value ?? ''} aria-invalid=${invalid} aria-describedby=${describedBy}
      onInput=${(e) => set(e.target.value === '' ? '' : Number(e.target.value))} />${help}</div>`;
  }
  if (s.type === 'string' || !s.type) {
    return html`<div class="field">${label}<input id=${id} type="text" value=${value ?? ''} aria-invalid=${invalid}
      aria-describedby=${describedBy} onInput=${(e) => set(e.target.value)} />${help}</div>`;
  }
  // Any other schema: its JSON.
  return html`<div class="field">${label}<textarea id=${id} aria-invalid=${invalid} aria-describedby=${describedBy}
    onInput=${(e) => { try { set(JSON.parse(e.target.value)); } catch { /* kept until it parses */ } }}>${JSON.stringify(value)}</textarea>${help}</div>`;
}

export function SendView() {
  const [catalog, catErr] = useLoad(() => get('/commands'));
  const [type, setType] = useState('');
  const [version, setVersion] = useState('');
  const [schema, setSchema] = useState(null);
  const [value, setValue] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [touched, setTouched] = useState(false);
  const edit = (v) => {
    setValue(v);
    setTouched(true);
  };
  const entries = (catalog && catalog.commands) || [];
  const types = [...new Set(entries.map((e) => e.type))].sort();
  const versions = entries.filter((e) => e.type === type);
  const entry = versions.find((e) => e.version === version);

  useEffect(() => {
    if (!type && types.length) setType(types.includes('PlaceOrder') ? 'PlaceOrder' : types[0]);
  }, [catalog]);
  useEffect(() => {
    if (versions.length) setVersion(versions[versions.length - 1].version);
  }, [type, catalog]);
  useEffect(() => {
    if (!entry) return undefined;
    // Only the schema of the type and version chosen last is shown: a
    // change of type sets the version again, and the answer for the one
    // in between may come last.
    let chosen = true;
    setSchema(null);
    setError(null);
    get(`/commands/${encodeURIComponent(entry.schema)}/${encodeURIComponent(entry.version)}`).then((s) => {
      if (!chosen) return;
      setSchema(s);
      setValue(initial(s));
      setTouched(false);
    }, (err) => { if (chosen) setError(err); });
    return () => { chosen = false; };
  }, [type, version, catalog]);

  if (!can('write')) return html`<section><h1>Send a command</h1><p>Sending commands needs the write scope.</p></section>`;
  // The violations shown at the fields: the API's, after a refusal; before
  // that, once the form is edited, those the form can tell itself.
  const errs = {};
  const unplaced = [];
  const api = error instanceof ApiError && error.violations.length > 0;
  const early = !api && touched && schema && value !== null ? check(schema, clean(value), '$.data') : [];
  for (const v of api ? error.violations : early) {
    const p = v.path.startsWith('$.data') ? v.path : null;
    if (p) (errs[p] = errs[p] || []).push(v.message);
    else unplaced.push(v);
  }
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    const env = { specversion: '1.0', id: uuid(), source: 'agentbus-console', type, dataschema: `${entry.schema}/${entry.version}`,
      datacontenttype: 'application/json', time: new Date().toISOString(), data: clean(value) };
    try {
      const r = await call('POST', '/commands', env);
      go(`traces/${encodeURIComponent(r.body.id)}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const examples = (schema && schema.examples) || [];
  return html`<section aria-labelledby="send-h">
    <h1 id="send-h">Send a command</h1>
    <${Problem} error=${catErr} />
    <form onSubmit=${submit} aria-label="Command" novalidate>
      <div class="field"><label for="cmd-type">Type</label>
        <select id="cmd-type" onChange=${(e) => setType(e.target.value)}>
          ${types.map((t) => html`<option value=${t} selected=${t === type}>${t}</option>`)}</select></div>
      <div class="field"><label for="cmd-version">Version</label>
        <select id="cmd-version" onChange=${(e) => setVersion(e.target.value)}>
          ${versions.map((v) => html`<option value=${v.version} selected=${v.version === version}>${v.version}</option>`)}</select></div>
      ${entry && html`<p class="hint">${entry.description}</p>`}
      ${examples.length > 0 && html`<p class="examples">${examples.map((x, i) => html`<button type="button"
        onClick=${() => { edit(x); setError(null); }}>Use example ${i + 1}</button> `)}</p>`}
      ${schema && value !== null && html`<${Field} s=${schema} name="data" path="$.data" value=${value} set=${(v) => { edit(v); setError(null); }} errs=${errs} />`}
      ${error && html`<div class="error" role="alert"><strong>${error.code}</strong>: ${error.message}
        ${unplaced.length > 0 && html`<ul>${unplaced.map((v) => html`<li><code>${v.path}</code>: ${v.message}</li>`)}</ul>`}
        ${Object.keys(errs).length > 0 && html`<ul>${Object.entries(errs).map(([p, m]) => html`<li><code>${p}</code>: ${m.join('; ')}</li>`)}</ul>`}</div>`}
      ${early.length > 0 && html`<p class="hint" role="status">${early.length} problem${early.length === 1 ? '' : 's'} found before sending, shown at
        ${early.length === 1 ? 'its field' : 'their fields'}; the API checks the command again when it is sent.</p>`}
      <button type="submit" class="primary" disabled=${busy || !schema}>Send</button>
    </form>
  </section>`;
}
