import { html, render } from './vendor/htm-preact.js';

render(html`<main><h1>agentbus</h1></main>`, document.getElementById('app'));
