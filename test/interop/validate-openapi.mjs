// validate-openapi.mjs FILE: validates the OpenAPI document in FILE (JSON)
// with @seriousme/openapi-schema-validator, a standard validator built on
// the official OpenAPI JSON Schemas. It requires OpenAPI 3.1, checks that
// every internal $ref resolves, that path templates and path parameters
// match, and that operationIds are unique. It prints
// every problem and exits 1 when the document is invalid, 2 on a usage or
// read error. Install with: npm ci --prefix test/interop
import { readFile } from "node:fs/promises";
import { Validator } from "@seriousme/openapi-schema-validator";

const file = process.argv[2];
if (!file || process.argv.length > 3) {
  console.error("usage: node validate-openapi.mjs FILE.json");
  process.exit(2);
}

let doc;
try {
  doc = JSON.parse(await readFile(file, "utf8"));
} catch (err) {
  console.error(`${file}: cannot read JSON: ${err.message}`);
  process.exit(2);
}

const problems = [];
const validator = new Validator();
const res = await validator.validate(doc);
if (!res.valid) {
  problems.push("does not match the OpenAPI schema:");
  for (const e of [].concat(res.errors ?? [])) {
    if (typeof e === "string") {
      problems.push(`  ${e}`);
    } else {
      problems.push(`  ${e.instancePath || "/"}: ${e.message ?? ""} ${JSON.stringify(e.params ?? {})}`);
    }
  }
} else {
  if (validator.version !== "3.1") {
    problems.push(`OpenAPI version is ${validator.version}, want 3.1`);
  }
  try {
    checkPathParams(validator.resolveRefs(), problems);
  } catch (err) {
    problems.push(`unresolvable $ref: ${err.message}`);
  }
}

// checkPathParams: every {name} of a path template has an "in: path"
// parameter, on the path item or on each of its operations, and no
// operation declares a path parameter its path lacks (OpenAPI 3.1 §4.8.8).
function checkPathParams(resolved, problems) {
  const methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
  for (const [path, item] of Object.entries(resolved.paths ?? {})) {
    const names = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
    const pathLevel = (item.parameters ?? []).filter((p) => p.in === "path").map((p) => p.name);
    for (const method of methods) {
      const op = item[method];
      if (!op) continue;
      const declared = new Set([...pathLevel, ...(op.parameters ?? []).filter((p) => p.in === "path").map((p) => p.name)]);
      for (const n of names) {
        if (!declared.has(n)) problems.push(`${method.toUpperCase()} ${path}: path parameter {${n}} is not declared`);
      }
      for (const n of declared) {
        if (!names.includes(n)) problems.push(`${method.toUpperCase()} ${path}: declares path parameter ${n} that the path lacks`);
      }
    }
  }
}

const seen = new Map();
for (const [path, item] of Object.entries(doc.paths ?? {})) {
  for (const [method, op] of Object.entries(item ?? {})) {
    if (op && typeof op === "object" && typeof op.operationId === "string") {
      const where = `${method.toUpperCase()} ${path}`;
      if (seen.has(op.operationId)) {
        problems.push(`operationId ${op.operationId} used by ${seen.get(op.operationId)} and ${where}`);
      }
      seen.set(op.operationId, where);
    }
  }
}

if (problems.length > 0) {
  console.error(`${file}: invalid OpenAPI document`);
  for (const p of problems) console.error(p);
  process.exit(1);
}
console.log(`${file}: valid OpenAPI ${doc.openapi} (${Object.keys(doc.paths ?? {}).length} paths, ${seen.size} operations)`);
