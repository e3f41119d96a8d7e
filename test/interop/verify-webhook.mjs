// Verifies webhook deliveries with the standardwebhooks package (the
// Standard Webhooks reference implementation). Reads a JSON array of
// {secret, headers, body} on standard input and prints one line per item:
// "ok" or "fail: <reason>". Exits 0 whatever the verdicts.
import { Webhook } from "standardwebhooks";

const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const items = JSON.parse(Buffer.concat(chunks).toString("utf8"));
for (const it of items) {
  try {
    new Webhook(it.secret).verify(it.body, it.headers);
    console.log("ok");
  } catch (e) {
    console.log("fail: " + String(e && e.message ? e.message : e).replace(/\n/g, " "));
  }
}
