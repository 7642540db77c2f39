// Validates Kubernetes manifests against the Kubernetes schemas
// (docs/kubernetes.md "Deploy"): each document must be a known apiVersion and
// kind of kubernetes-models (the Kubernetes OpenAPI schema as validators),
// pass that model's validation (types, required fields, formats), and name no
// field the schema does not have (kubernetes-models alone lets unknown fields
// through, as the API server's non-strict decoding does; kubectl's strict
// field validation would not).
//
//   node validate.mjs FILE...                    every document valid: exit 0
//   node validate.mjs --expect-invalid FILE...   every FILE has an invalid document: exit 0
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import yaml from "js-yaml";

const here = path.dirname(fileURLToPath(import.meta.url));
const modelsDir = path.join(here, "node_modules", "kubernetes-models");
if (!fs.existsSync(modelsDir)) {
  console.error(`validate: ${modelsDir} is missing; run scripts/setup (npm ci in deploy/)`);
  process.exit(2);
}

// --- Unknown fields, from the models' TypeScript declarations. ---
const interfaces = new Map(); // .d.ts path -> {fields: Map(name -> type), imports}

function resolveImport(fromFile, spec) {
  let p;
  if (spec.startsWith(".")) p = path.resolve(path.dirname(fromFile), spec);
  else p = path.join(here, "node_modules", spec);
  p = p.replace(/\.js$/, "");
  return p + ".d.ts";
}

function parseDts(file) {
  if (interfaces.has(file)) return interfaces.get(file);
  let result = null;
  if (fs.existsSync(file)) {
    const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const imports = new Map();
    for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
      for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
        imports.set(name, resolveImport(file, m[2]));
      }
    }
    const start = text.search(/export interface I\w+[^{]*\{/);
    if (start >= 0) {
      const fields = new Map();
      let i = text.indexOf("{", start) + 1;
      let depth = 1;
      let entry = "";
      for (; i < text.length && depth > 0; i++) {
        const c = text[i];
        if (c === "{" || c === "<") depth += c === "{" ? 1 : 0;
        if (c === "}") depth--;
        if (depth === 0) break;
        entry += c;
        if (c === ";" && depth === 1) {
          const m = entry.match(/^\s*"([^"]+)"\??:\s*([\s\S]*);\s*$/);
          if (m) fields.set(m[1], m[2].trim());
          entry = "";
        }
      }
      result = { fields, imports };
    }
  }
  interfaces.set(file, result);
  return result;
}

// Checks `value` against a type expression seen in `ctx` (a parsed file).
function checkType(value, type, ctx, where, errors) {
  type = type.trim();
  let m;
  if ((m = type.match(/^Array<([\s\S]*)>$/))) {
    if (Array.isArray(value)) value.forEach((v, i) => checkType(v, m[1], ctx, `${where}[${i}]`, errors));
    return;
  }
  if ((m = type.match(/^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/))) {
    if (value && typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) checkType(v, m[1], ctx, `${where}.${k}`, errors);
    }
    return;
  }
  if (/^I\w+$/.test(type) && ctx.imports.has(type)) {
    checkObject(value, ctx.imports.get(type), where, errors);
  }
}

function checkObject(value, file, where, errors) {
  // Arbitrary JSON, stored as given (a DRA opaque config's parameters):
  // checkSliceConfigs checks gpuslice's own.
  if (path.basename(file, ".d.ts") === "RawExtension") return;
  const iface = parseDts(file);
  if (!iface || !value || typeof value !== "object" || Array.isArray(value)) return;
  for (const [k, v] of Object.entries(value)) {
    if (!iface.fields.has(k)) {
      errors.push(`${where}.${k}: unknown field (${path.basename(file, ".d.ts")} has no "${k}")`);
      continue;
    }
    checkType(v, iface.fields.get(k), iface, `${where}.${k}`, errors);
  }
}

// The parameters of every opaque DRA config for driver gpuslice.io: a
// SliceConfig, refused as gpusliced refuses it at prepare
// (src/daemon/kubelet/claim_reader.h SliceConfigAsksForMps).
function checkSliceConfigs(value, where, errors) {
  if (!value || typeof value !== "object") return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => checkSliceConfigs(v, `${where}[${i}]`, errors));
    return;
  }
  if (value.driver === "gpuslice.io" && "parameters" in value) {
    const p = value.parameters;
    const at = `${where}.parameters`;
    if (!p || typeof p !== "object" || Array.isArray(p)) {
      errors.push(`${at}: a SliceConfig must be an object`);
    } else {
      for (const k of Object.keys(p)) {
        if (!["apiVersion", "kind", "tier"].includes(k)) {
          errors.push(`${at}.${k}: unknown field (SliceConfig has apiVersion, kind, tier)`);
        }
      }
      if (p.apiVersion !== "gpuslice.io/v1alpha1" || p.kind !== "SliceConfig") {
        errors.push(`${at}: ${p.apiVersion} ${p.kind} is not gpuslice.io/v1alpha1 SliceConfig`);
      }
      if ("tier" in p && !["shared", "mps"].includes(p.tier)) {
        errors.push(`${at}.tier: ${JSON.stringify(p.tier)} is neither "shared" nor "mps"`);
      }
    }
  }
  for (const [k, v] of Object.entries(value)) checkSliceConfigs(v, `${where}.${k}`, errors);
}

// --- Documents. ---
async function validateDoc(doc) {
  const errors = [];
  if (!doc || typeof doc !== "object") return ["not an object"];
  const { apiVersion, kind } = doc;
  if (typeof apiVersion !== "string" || typeof kind !== "string") return ["no apiVersion/kind"];
  const modulePath = apiVersion.includes("/") ? apiVersion : `v1`;
  const dir = path.join(modelsDir, ...modulePath.split("/"));
  const dts = path.join(dir, `${kind}.d.ts`);
  if (!fs.existsSync(dts)) return [`${apiVersion} ${kind}: no such kind in the Kubernetes schemas`];
  const mod = await import(path.join(dir, `${kind}.js`));
  try {
    new mod[kind](doc).validate();
  } catch (e) {
    errors.push(String(e.message || e).split("\n").slice(0, 6).join("; "));
  }
  checkObject(doc, dts, kind, errors);
  checkSliceConfigs(doc, kind, errors);
  return errors;
}

const args = process.argv.slice(2);
const expectInvalid = args[0] === "--expect-invalid";
const files = expectInvalid ? args.slice(1) : args;
if (files.length === 0) {
  console.error("usage: node validate.mjs [--expect-invalid] FILE...");
  process.exit(2);
}
let failed = false;
for (const file of files) {
  let docs;
  try {
    docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
  } catch (e) {
    docs = null;
    if (!expectInvalid) {
      console.error(`${file}: not YAML: ${e.message}`);
      failed = true;
    }
    continue;
  }
  let invalid = 0;
  for (const [i, doc] of docs.entries()) {
    const errors = await validateDoc(doc);
    const name = `${file}#${i} ${doc?.kind ?? "?"} ${doc?.metadata?.name ?? ""}`;
    if (errors.length) {
      invalid++;
      if (!expectInvalid) {
        for (const e of errors) console.error(`${name}: ${e}`);
      } else {
        console.log(`${name}: invalid as expected: ${errors[0]}`);
      }
    } else if (!expectInvalid) {
      console.log(`${name}: ok`);
    }
  }
  if (expectInvalid && invalid === 0) {
    console.error(`${file}: expected an invalid document, every one validated`);
    failed = true;
  }
  if (!expectInvalid && invalid > 0) failed = true;
}
process.exit(failed ? 1 : 0);
