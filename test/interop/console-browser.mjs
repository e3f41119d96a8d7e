// Drives the web console in a headless Chromium (puppeteer-core) against a
// running agentbus with bearer authentication, and prints what it saw as
// JSON on stdout: {steps, errors, failed, unexpected, foreign, axe,
// screenshots}.
//
// usage: node console-browser.mjs CONFIG.json
// CONFIG: {chromium, base, writeKey, readKey, revokeURL, artifacts, hookURL}
//   base       agentbus's base URL (http://127.0.0.1:PORT)
//   writeKey   an API key with read, write and admin
//   readKey    an API key with read only; revoked (POST revokeURL) near the end
//   artifacts  the directory for the screenshots
import { createHash } from 'node:crypto';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const axeSource = readFileSync(new URL('./node_modules/axe-core/axe.min.js', import.meta.url), 'utf8');
const origin = new URL(cfg.base).origin;
const out = { steps: [], errors: [], failed: [], unexpected: [], foreign: [], axe: {}, screenshots: [] };
const step = (s) => { out.steps.push(s); };

// Answers with a status of 400 and more that a step expects, by method and
// path: the rest are failures.
const expected = [];
const expect = (status, method, re) => expected.push({ status, method, re });

async function token(key) {
  const res = await fetch(`${cfg.base}/oauth/token`, {
    method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_secret: key }),
  });
  return (await res.json()).access_token;
}

// correlationId is the id agentbus derives for a command of tenant with
// source and id (envelope.CorrelationID: a UUIDv5).
function correlationId(tenant, source, id) {
  const ns = Buffer.from('6f1d2a9c3b0e5e7a9c410d7b8e2f5a13', 'hex');
  const h = createHash('sha1').update(Buffer.concat([ns, Buffer.from(`${tenant}\0${source}\0${id}`)])).digest().subarray(0, 16);
  h[6] = (h[6] & 0x0f) | 0x50;
  h[8] = (h[8] & 0x3f) | 0x80;
  const x = h.toString('hex');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

async function rest(method, path, body) {
  const res = await fetch(cfg.base + path, {
    method, headers: { Authorization: `Bearer ${await token(cfg.writeKey)}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

function watch(page, name) {
  page.on('console', (m) => {
    if (m.type() !== 'error' && m.type() !== 'warn') return;
    const text = m.text();
    // Chromium reports every answer of 400 and more as a console error;
    // they are checked one by one below, as answers.
    if (/^Failed to load resource: the server responded with a status of \d+/.test(text)) return;
    out.errors.push(`${name}: console ${m.type()}: ${text}`);
  });
  page.on('pageerror', (e) => out.errors.push(`${name}: page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : '';
    if (why === 'net::ERR_ABORTED' && r.resourceType() === 'fetch') return; // a stream the console closed itself
    out.failed.push(`${name}: ${r.method()} ${r.url()}: ${why}`);
  });
  page.on('request', (r) => {
    const u = r.url();
    if (u.startsWith('data:') || u.startsWith('about:')) return;
    if (new URL(u).origin !== origin) out.foreign.push(`${name}: ${r.method()} ${u}`);
  });
  page.on('response', (r) => {
    if (r.status() < 400) return;
    const u = new URL(r.url());
    const m = r.request().method();
    const i = expected.findIndex((e) => e.status === r.status() && e.method === m && e.re.test(u.pathname));
    if (i < 0) out.unexpected.push(`${name}: ${m} ${u.pathname}${u.search}: ${r.status()}`);
  });
}

async function axe(page, name) {
  await page.evaluate(axeSource);
  const r = await page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const res = await axe.run(document, { resultTypes: ['violations'] });
    return res.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5) }));
  });
  out.axe[name] = r;
}

async function shot(page, name) {
  const file = join(cfg.artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  out.screenshots.push(file);
}

// Each page under test has a browser context of its own (its own
// sessionStorage). The console's CSP stays on: a violation is a console
// error. Axe-core runs through the DevTools protocol, which the CSP does
// not govern.
async function newPage(browser, name) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  watch(page, name);
  page.setDefaultTimeout(15000);
  return page;
}

async function signIn(page, key) {
  await page.waitForSelector('#signin-key');
  await page.type('#signin-key', key);
  await page.click('form[aria-label="Sign in"] button[type=submit]');
  await page.waitForSelector('header nav');
}

const textOf = (page, sel) => page.$$eval(sel, (els) => els.map((e) => e.textContent.trim()));

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'agentbus-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: cfg.chromium, headless: true, userDataDir: dir, defaultViewport: { width: 1280, height: 860 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', `--user-data-dir=${dir}`],
  });
  try {
    await scenarios[cfg.scenario || 'full'](browser);
  } catch (e) {
    // The state of each page at the failure, for the report.
    for (const [i, p] of (await browser.pages()).entries()) {
      await shot(p, `failure-${i}`).catch(() => null);
    }
    throw e;
  } finally {
    await browser.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const scenarios = {};

// full: bearer authentication, single tenant, every view.
scenarios.full = async (browser) => {
  {
    // Signing in.
    const page = await newPage(browser, 'write');
    await page.goto(`${cfg.base}/console/`);
    await page.waitForSelector('#signin-key'); // drawn once the manifest is read
    await shot(page, '01-signin');
    await axe(page, 'signin');
    // A wrong key: the token endpoint's refusal, shown at the form.
    expect(401, 'POST', /^\/oauth\/token$/);
    await page.type('#signin-key', 'ab_wrong_key');
    await page.click('form[aria-label="Sign in"] button[type=submit]');
    await page.waitForFunction(() => document.querySelector('form .error')?.textContent.includes('invalid_client'));
    if (await page.$('.notice')) throw new Error('a wrong key at sign-in is told as a session that ended');
    await page.$eval('#signin-key', (el) => { el.value = ''; el.dispatchEvent(new Event('input', { bubbles: true })); });
    step('a wrong key is refused at the sign-in, with the token endpoint\'s error');
    await signIn(page, cfg.writeKey);
    step('signed in');

    // The live view receives an event sent over REST.
    await page.waitForSelector('[data-state="live"]');
    const orderId = `ord-live-${Date.now()}`;
    await rest('POST', '/commands', {
      specversion: '1.0', id: `live-${Date.now()}`, source: 'console-test', type: 'PlaceOrder', dataschema: 'place-order/2.0',
      datacontenttype: 'application/json', time: new Date().toISOString(),
      data: { orderId, customer: 'Live', items: [{ sku: 'A-1', quantity: 1 }], currency: 'EUR' },
    });
    await page.waitForFunction((id) => [...document.querySelectorAll('ol.events li')].some((li) => li.textContent.includes('OrderPlaced')), {}, orderId);
    await page.click('ol.events li button.row');
    await page.waitForFunction((id) => document.querySelector('ol.events .detail pre')?.textContent.includes(id), {}, orderId);
    step('live view received the event sent over REST, and opened its envelope');
    await shot(page, '02-events');
    await axe(page, 'events');

    // Pause holds new events back; resume shows them.
    const note = (text) => rest('POST', '/commands', {
      specversion: '1.0', id: `note-${Date.now()}-${Math.random()}`, source: 'console-test', type: 'AddNote', dataschema: 'add-note/1.0',
      datacontenttype: 'application/json', time: new Date().toISOString(), data: { text },
    });
    const order = (id) => rest('POST', '/commands', {
      specversion: '1.0', id: `order-${id}`, source: 'console-test', type: 'PlaceOrder', dataschema: 'place-order/2.0',
      datacontenttype: 'application/json', time: new Date().toISOString(),
      data: { orderId: id, customer: 'Filter', items: [{ sku: 'F-1', quantity: 2 }], currency: 'EUR' },
    });
    const listed = () => textOf(page, 'ol.events li .type');
    const button = (label) => page.$$eval('p.bar button', (bs, l) => bs.find((b) => b.textContent.startsWith(l)).click(), label);
    await button('Pause');
    await note('while paused');
    await page.waitForFunction(() => [...document.querySelectorAll('p.bar button')].some((b) => b.textContent === 'Resume (1 new)'));
    if ((await listed()).includes('NoteAdded')) throw new Error('an event shown while paused');
    await button('Resume');
    await page.waitForFunction(() => document.querySelector('ol.events')?.textContent.includes('NoteAdded'));
    step('paused: the new event held and counted; shown on resume');

    // Filters: by type, then by correlation id from the log's start.
    await page.type('#f-type', 'NoteAdded');
    await page.click('form[aria-label="Filter events"] button[type=submit]');
    await page.waitForFunction(() => !document.querySelector('ol.events'));
    await page.waitForSelector('[data-state="live"]');
    await order(`ord-filtered-${Date.now()}`);
    await note('through the filter');
    await page.waitForFunction(() => document.querySelector('ol.events')?.textContent.includes('NoteAdded'));
    if ((await listed()).some((t) => t !== 'NoteAdded')) throw new Error(`the type filter let through: ${await listed()}`);
    const filtered = await order(`ord-corr-${Date.now()}`);
    await page.$eval('#f-type', (el) => { el.value = ''; el.dispatchEvent(new Event('input', { bubbles: true })); });
    await page.type('#f-corr', filtered.id);
    await page.click('form[aria-label="Filter events"] label.check input');
    await page.click('form[aria-label="Filter events"] button[type=submit]');
    await page.waitForFunction(() => document.querySelector('ol.events')?.textContent.includes('OrderPlaced'));
    await new Promise((r) => setTimeout(r, 500));
    if ((await listed()).join() !== 'OrderPlaced') throw new Error(`the correlation filter shows: ${await listed()}`);
    step('filtered by type (NoteAdded only), then by correlation id from the log\'s start (its one event)');
    await shot(page, '02b-events-filtered');

    // Sending a command from the generated form: a violation at its path
    // first, then the command, then its story.
    await page.click('header nav a[href$="/console/send"]');
    await page.waitForSelector('#fld-data-currency');
    // Versions: PlaceOrder 1.0 has no currency; 2.0, the newest and the
    // one chosen first, has.
    await page.select('#cmd-version', '1.0');
    await page.waitForFunction(() => document.querySelector('#fld-data-orderId') && !document.querySelector('#fld-data-currency'));
    await page.select('#cmd-version', '2.0');
    await page.waitForSelector('#fld-data-currency');
    await page.select('#cmd-type', 'AddNote');
    await page.waitForFunction(() => document.querySelector('#fld-data-text') && !document.querySelector('#fld-data-orderId'));
    // Back to PlaceOrder the version is AddNote's (1.0) for a moment, then
    // the newest (2.0): the answer for PlaceOrder 1.0, held back here until
    // after 2.0's, must not replace the form of the version chosen last.
    await page.evaluate(() => {
      window.fetchAsIs = window.fetch;
      window.fetch = (url, init) => {
        const answer = window.fetchAsIs(url, init);
        if (!String(url).endsWith('/commands/place-order/1.0')) return answer;
        return answer.then((r) => new Promise((done) => setTimeout(() => done(r), 400)));
      };
    });
    await page.select('#cmd-type', 'PlaceOrder');
    await page.waitForSelector('#fld-data-currency');
    await new Promise((r) => setTimeout(r, 800));
    await page.evaluate(() => { window.fetch = window.fetchAsIs; });
    if (!(await page.$('#fld-data-currency'))) throw new Error('the form shows PlaceOrder 1.0 (an earlier answer) under version 2.0');
    step('the form follows the type and the version chosen (PlaceOrder 1.0 without currency, 2.0 with; AddNote), whatever order the schemas come in');
    const examples = await page.$$('p.examples button');
    if (examples.length === 0) throw new Error('no example offered');
    await examples[0].click();
    const formOrder = `ord-form-${Date.now()}`;
    await page.$eval('#fld-data-orderId', (el) => { el.value = ''; });
    await page.type('#fld-data-orderId', formOrder);
    await page.$eval('#fld-data-customer', (el) => { el.value = ''; el.dispatchEvent(new Event('input', { bubbles: true })); });
    await page.waitForSelector('.violation[data-path="$.data.customer"]');
    await page.waitForFunction(() => document.querySelector('form[aria-label="Command"] p[role="status"]')?.textContent.includes('1 problem found before sending'));
    step('the missing customer shown at $.data.customer before sending');
    expect(400, 'POST', /\/commands$/);
    await page.click('form[aria-label="Command"] button[type=submit]');
    await page.waitForFunction(() => document.querySelector('form [role="alert"]')?.textContent.includes('VALIDATION_FAILED'));
    await page.waitForSelector('.violation[data-path="$.data.customer"]');
    if (await page.$('form[aria-label="Command"] p[role="status"]')) throw new Error('the early check still shown beside the API\'s');
    step('sent anyway: the API\'s VALIDATION_FAILED, its violation shown at $.data.customer');
    await shot(page, '03-send-violation');
    await axe(page, 'send');
    await page.type('#fld-data-customer', 'Ada from the form');
    if (await page.$('form[aria-label="Command"] p[role="status"]')) throw new Error('the early check finds problems in a valid command');
    expect(404, 'GET', /\/traces\/[^/]+$/); // the story may be read before the command's first event
    await page.click('form[aria-label="Command"] button[type=submit]');
    await page.waitForFunction(() => location.pathname.startsWith('/console/traces/'));
    await page.waitForSelector('[data-status="processed"]');
    await page.waitForFunction(() => document.querySelector('ol.timeline')?.textContent.includes('OrderPlaced'));
    const timeline = await textOf(page, 'ol.timeline li');
    if (!timeline.some((t) => t.includes('PlaceOrder command'))) throw new Error(`timeline without the command: ${timeline}`);
    step('sent from the form; the story shows the command and its OrderPlaced event');
    await shot(page, '04-trace');
    await axe(page, 'trace');

    // The story of a command whose event a local receiver takes.
    if (cfg.hookURL) {
      await rest('POST', '/subscriptions', { webhook: { url: cfg.hookURL }, filter: { types: ['NoteAdded'] } });
      await new Promise((r) => setTimeout(r, 500));
      const ack = await rest('POST', '/commands', {
        specversion: '1.0', id: `hooked-${Date.now()}`, source: 'console-test', type: 'AddNote', dataschema: 'add-note/1.0',
        datacontenttype: 'application/json', time: new Date().toISOString(), data: { text: 'to the receiver' },
      });
      await page.goto(`${cfg.base}/console/traces/${ack.id}`);
      await page.waitForFunction(() => document.querySelector('ol.timeline')?.textContent.includes('Webhook attempt 1: HTTP 200'), { timeout: 30000 });
      step('the story shows the webhook attempt of the local receiver');
      await shot(page, '05-trace-webhook');
    }

    // A story open before its command is sent: the page's own live stream
    // is pushed the command's event, and the story shows that push.
    {
      const id = `pushed-${Date.now()}`;
      const corr = correlationId('default', 'console-test', id);
      await page.goto(`${cfg.base}/console/traces/${corr}`);
      await page.waitForFunction(() => document.querySelector('p[role="status"]')?.textContent.includes('No trace yet'));
      await new Promise((r) => setTimeout(r, 500)); // its live stream open
      const ack = await rest('POST', '/commands', {
        specversion: '1.0', id, source: 'console-test', type: 'AddNote', dataschema: 'add-note/1.0',
        datacontenttype: 'application/json', time: new Date().toISOString(), data: { text: 'pushed to the story' },
      });
      if (ack.id !== corr) throw new Error(`correlation id ${ack.id}, derived ${corr}`);
      await page.waitForFunction(() => [...document.querySelectorAll('ol.timeline li.tl-push')].some((li) => li.textContent.includes('Pushed to an SSE stream') && li.textContent.includes('NoteAdded')), { timeout: 30000 });
      step('a story open before its command shows the push of its event to the page\'s own live stream');
      await shot(page, '05b-trace-push');
    }

    // The registries: an agent paused from its page.
    await rest('POST', '/agents', { id: 'console-agent', name: 'Console agent', accepts: ['ShipOrder'] }).catch(() => null);
    await page.goto(`${cfg.base}/console/agents`);
    await page.waitForSelector('table');
    await page.waitForFunction(() => [...document.querySelectorAll('td button')].some((b) => b.textContent === 'Pause'));
    await page.$$eval('td button', (bs) => bs.find((b) => b.textContent === 'Pause').click());
    await page.waitForFunction(() => [...document.querySelectorAll('td')].some((td) => td.textContent.startsWith('paused')), { timeout: 20000 });
    step('agent paused from the console');
    // What is pending: a command the paused agent accepts waits for it.
    await rest('POST', '/commands', {
      specversion: '1.0', id: `held-${Date.now()}`, source: 'console-test', type: 'ShipOrder', dataschema: 'ship-order/1.0',
      datacontenttype: 'application/json', time: new Date().toISOString(), data: { orderId: 'held-1', carrier: 'dhl' },
    });
    await page.$$eval('td button.link', (bs) => bs.find((b) => b.textContent === 'console-agent').click());
    await page.waitForFunction(() => document.querySelector('p.pending')?.textContent.includes('1 command waiting'), { timeout: 20000 });
    step('the paused agent\'s page says one command waits for it');
    await shot(page, '06-agents');
    await axe(page, 'agents');
    for (const [route, name] of [['catalog', '07-catalog'], ['services', '08-services'], ['subscriptions', '09-subscriptions']]) {
      await page.goto(`${cfg.base}/console/${route}`);
      await page.waitForSelector('main section h1');
      await new Promise((r) => setTimeout(r, 300));
      await shot(page, name);
      await axe(page, route);
    }
    step('catalogue, services and subscriptions shown');

    // The subscription of the local receiver: its attempts, its secret
    // revealed on request, disabled and enabled, the secret rotated, dead
    // letters redelivered and a replay from the log's start.
    if (cfg.hookURL) {
      const click = (label) => page.$$eval('li.sub button', (bs, l) => {
        const b = bs.find((x) => x.textContent.trim() === l);
        if (!b) throw new Error(`no button ${l}: ${bs.map((x) => x.textContent.trim())}`);
        b.click();
      }, label);
      const note = (re) => page.waitForFunction((src) => new RegExp(src).test(document.querySelector('p.note')?.textContent || ''), {}, re.source);
      await page.waitForSelector('li.sub');
      await click('Attempts');
      await page.waitForFunction(() => document.querySelector('li.sub .detail')?.textContent.includes('HTTP 200'));
      await click('Reveal secret');
      await page.waitForFunction(() => (document.querySelector('code.secret')?.textContent || '').startsWith('whsec_'));
      const before = await page.$eval('code.secret', (c) => c.textContent);
      await click('Hide secret');
      await click('Disable');
      await page.waitForFunction(() => document.querySelector('li.sub .status')?.textContent === 'disabled', { timeout: 20000 });
      await click('Enable');
      await page.waitForFunction(() => document.querySelector('li.sub .status')?.textContent === 'active', { timeout: 20000 });
      await click('Rotate secret');
      await note(/^Rotate/);
      await click('Reveal secret');
      await page.waitForFunction((old) => {
        const t = document.querySelector('code.secret')?.textContent || '';
        return t.startsWith('whsec_') && t !== old;
      }, { timeout: 20000 }, before);
      await click('Redeliver dead letters');
      await note(/^Redeliver/);
      await page.type('li.sub input', '0');
      await click('Replay');
      await note(/^Replay/);
      step('subscription: attempts, secret revealed, disabled, enabled, secret rotated, redelivered, replayed');
      await shot(page, '09-subscription-actions');
    }

    // A read-only key's view: no write buttons.
    const ro = await newPage(browser, 'read-only');
    await ro.goto(`${cfg.base}/console/agents`);
    await signIn(ro, cfg.readKey);
    await ro.waitForSelector('table');
    const buttons = await textOf(ro, 'main button');
    const nav = await textOf(ro, 'header nav a');
    if (buttons.some((b) => /^(Pause|Resume|Delete)$/.test(b)) || nav.includes('Send a command')) {
      throw new Error(`a read-only key sees write actions: ${buttons} / ${nav}`);
    }
    await ro.goto(`${cfg.base}/console/subscriptions`);
    await ro.waitForSelector('main section h1');
    if (await ro.$('form[aria-label="Create a subscription"]')) throw new Error('a read-only key sees the create form');
    step('a read-only key sees no write buttons');
    await shot(ro, '10-read-only');

    // The key revoked: the next call brings the sign-in back.
    await fetch(cfg.revokeURL, { method: 'POST' });
    expect(401, 'GET', /.*/);
    await ro.click('header nav a[href$="/console/agents"]');
    await ro.waitForSelector('#signin-key');
    await ro.waitForSelector('.notice');
    step('the sign-in came back after the key was revoked');
    await shot(ro, '11-revoked');
  }
};

// tenants: API keys in a header, multi-tenant mode, a key valid for
// tenants a and b with read and write: the console of /a/ asks the API
// which scopes the key has, follows tenant a's log, and switches to b.
scenarios.tenants = async (browser) => {
  const page = await newPage(browser, 'tenants');
  await page.goto(`${cfg.base}/a/console/`);
  expect(401, 'GET', /^\/a\/commands$/); // a wrong key, tried first
  await page.waitForSelector('#signin-key'); // drawn once the manifest is read
  await page.type('#signin-key', 'ab_wrong_key');
  await page.click('form[aria-label="Sign in"] button[type=submit]');
  await page.waitForFunction(() => document.querySelector('form .error')?.textContent.includes('UNAUTHENTICATED'));
  if (await page.$('.notice')) throw new Error('a wrong key at sign-in is told as a session that ended');
  await page.$eval('#signin-key', (el) => { el.value = ''; el.dispatchEvent(new Event('input', { bubbles: true })); });
  expect(400, 'POST', /^\/a\/commands$/); // the write scope probe: refused for its body, not its scope
  expect(403, 'POST', /^\/a\/subscriptions\/[^/]+\/redeliver$/); // the admin scope probe: refused for the scope
  await signIn(page, cfg.writeKey);
  const nav = await textOf(page, 'header nav a');
  if (!nav.includes('Send a command')) throw new Error(`a write key sees no send view: ${nav}`);
  const scopes = await page.$eval('.who .scopes', (e) => e.textContent.trim());
  if (scopes !== 'read write') throw new Error(`scopes shown: ${scopes}`);
  step(`signed in with an API key on tenant a; scopes found: ${scopes}`);
  await page.waitForSelector('[data-state="live"]');
  const res = await fetch(`${cfg.base}/a/commands`, {
    method: 'POST', headers: { 'X-API-Key': cfg.writeKey, 'Content-Type': 'application/json' },
    body: JSON.stringify({ specversion: '1.0', id: `t-${Date.now()}`, source: 'console-test', type: 'AddNote', dataschema: 'add-note/1.0',
      datacontenttype: 'application/json', time: new Date().toISOString(), data: { text: 'tenant a' } }),
  });
  if (res.status !== 202) throw new Error(`POST /a/commands: ${res.status} ${await res.text()}`);
  await page.waitForFunction(() => document.querySelector('ol.events')?.textContent.includes('NoteAdded'));
  step('tenant a\'s live view received its event');
  await shot(page, '12-tenant-a');
  await axe(page, 'tenant-a');
  await page.$eval('#tenant-id', (el) => { el.value = ''; });
  await page.type('#tenant-id', 'b');
  await Promise.all([page.waitForNavigation(), page.click('form[aria-label="Tenant"] button')]);
  if (new URL(page.url()).pathname !== '/b/console/') throw new Error(`switched to ${page.url()}`);
  await page.waitForSelector('[data-state="live"]');
  if (await page.$('ol.events')) throw new Error('tenant b shows tenant a\'s events');
  step('switched to tenant b, still signed in, without tenant a\'s events');
  await shot(page, '13-tenant-b');
};

// open: --auth none: the console opens without a sign-in.
scenarios.open = async (browser) => {
  const page = await newPage(browser, 'open');
  await page.goto(`${cfg.base}/console/`);
  await page.waitForSelector('header nav');
  if (await page.$('#signin-key')) throw new Error('a sign-in with --auth none');
  if (await page.$('button.link')) throw new Error('a sign-out button with --auth none');
  step('opened without a sign-in');
  await shot(page, '14-auth-none');
  await axe(page, 'auth-none');
  // A correlation id no command has: the story waits, then says so.
  expect(404, 'GET', /^\/traces\/[^/]+$/);
  await page.goto(`${cfg.base}/console/traces/00000000-0000-5000-8000-000000000000`);
  await page.waitForSelector('main [role="status"]');
  await page.waitForFunction(() => document.querySelector('main .error')?.textContent.includes('TRACE_NOT_FOUND'), { timeout: 20000 });
  step('a story of an unknown correlation id ends in TRACE_NOT_FOUND');
  await shot(page, '15-trace-not-found');
};

try {
  await main();
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e);
}
process.stdout.write(JSON.stringify(out));
