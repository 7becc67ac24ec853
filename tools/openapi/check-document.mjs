#!/usr/bin/env node
// The coordinator's OpenAPI document judged by ajv (strict mode, JSON Schema 2020-12, the
// ECMA-262 regex dialect with the `u` flag): what a client generated in another ecosystem
// validates with.
//
//   node check-document.mjs DOC.json [REPLIES.json]
//
// 1. Compiles every schema of the document: each component schema, and each schema of a
//    parameter, header, request body and response (strict: an unknown keyword, a pattern that
//    is no ECMA-262 `u` regex, a type the keywords contradict are errors).
// 2. Validates every example the document gives (a schema's `examples`) against its schema.
// 3. With REPLIES.json (an array of {method, path, status, headers, contentType, body} as a
//    real server answered them: body the parsed JSON of a JSON reply, the text of another,
//    null when there was none): each reply's operation and status must be declared, its
//    required headers present, and its body valid against the schema of its media type.
//
// Prints one JSON report ({schemas, examples, replies, errors: [...]}) on stdout; exits 1 when
// errors is not empty, 2 when it cannot run.
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const DOC_ID = "urn:lane-coordinator:openapi";
const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

function pointer(parts) {
  return "/" + parts.map((p) => String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("/");
}

// Every schema location of the document: [JSON pointer parts, schema].
function schemaLocations(doc) {
  const out = [];
  const media = (base, content) => {
    for (const [type, m] of Object.entries(content ?? {})) {
      if (m.schema) out.push([[...base, "content", type, "schema"], m.schema]);
    }
  };
  const headers = (base, hs) => {
    for (const [name, h] of Object.entries(hs ?? {})) {
      if (h.schema) out.push([[...base, "headers", name, "schema"], h.schema]);
    }
  };
  const response = (base, r) => {
    media(base, r.content);
    headers(base, r.headers);
  };
  const components = doc.components ?? {};
  for (const [name, s] of Object.entries(components.schemas ?? {})) {
    out.push([["components", "schemas", name], s]);
  }
  for (const [name, r] of Object.entries(components.responses ?? {})) {
    response(["components", "responses", name], r);
  }
  for (const [name, p] of Object.entries(components.parameters ?? {})) {
    if (p.schema) out.push([["components", "parameters", name, "schema"], p.schema]);
  }
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const base = ["paths", path, method];
      (op.parameters ?? []).forEach((p, i) => {
        if (p.schema) out.push([[...base, "parameters", i, "schema"], p.schema]);
      });
      if (op.requestBody) media([...base, "requestBody"], op.requestBody.content);
      for (const [status, r] of Object.entries(op.responses ?? {})) {
        response([...base, "responses", status], r);
      }
    }
  }
  return out;
}

// Every `examples` array inside a schema, with the location of the (sub)schema it belongs to.
function schemaExamples(node, parts, out) {
  if (Array.isArray(node)) {
    node.forEach((v, i) => schemaExamples(v, [...parts, i], out));
    return out;
  }
  if (node === null || typeof node !== "object") return out;
  for (const [key, value] of Object.entries(node)) {
    if (key === "examples" && Array.isArray(value)) {
      value.forEach((example, i) => out.push([parts, i, example]));
    } else if (key !== "enum" && key !== "const" && key !== "default") {
      schemaExamples(value, [...parts, key], out);
    }
  }
  return out;
}

function resolve(doc, ref) {
  if (!ref.startsWith("#/")) throw new Error(`not a local $ref: ${ref}`);
  let node = doc;
  for (const raw of ref.slice(2).split("/")) {
    node = node[raw.replace(/~1/g, "/").replace(/~0/g, "~")];
    if (node === undefined) throw new Error(`unresolved $ref: ${ref}`);
  }
  return node;
}

function templateMatches(template, path) {
  const re = new RegExp(
    "^" + template.split(/\{[^}]+\}/).map((s) => s.replace(/[.*+?^$()|[\]\\]/g, "\\$&")).join("[^/]+") + "$",
    "u",
  );
  return re.test(path);
}

function findPath(doc, path) {
  if (doc.paths[path]) return path;
  return Object.keys(doc.paths).find((t) => t.includes("{") && templateMatches(t, path));
}

function main() {
  const [docFile, repliesFile] = process.argv.slice(2);
  if (!docFile) {
    console.error("usage: node check-document.mjs DOC.json [REPLIES.json]");
    process.exit(2);
  }
  const doc = JSON.parse(readFileSync(docFile, "utf8"));
  const errors = [];
  // strict: true is every strict option (strictSchema, strictNumbers, strictTypes,
  // strictTuples, strictRequired); unicodeRegExp (the `u` flag) is ajv's default, set here to
  // say so. The OpenAPI 3.1 dialect's own keywords are added as annotations.
  const ajv = new Ajv2020({ strict: true, allErrors: true, unicodeRegExp: true, validateFormats: true });
  addFormats(ajv);
  ajv.addVocabulary(["openapi", "info", "servers", "paths", "components", "security", "tags"]);
  ajv.addVocabulary(["example", "externalDocs", "xml"]); // the OpenAPI 3.1 dialect
  try {
    ajv.addSchema({ ...doc, $id: DOC_ID });
  } catch (e) {
    errors.push({ where: "document", error: String(e.message ?? e) });
  }
  const validators = new Map();
  const compile = (parts) => {
    const where = pointer(parts);
    if (!validators.has(where)) {
      validators.set(where, ajv.compile({ $ref: `${DOC_ID}#${where}` }));
    }
    return validators.get(where);
  };
  let schemas = 0;
  for (const [parts] of schemaLocations(doc)) {
    try {
      compile(parts);
      schemas += 1;
    } catch (e) {
      errors.push({ where: pointer(parts), error: String(e.message ?? e) });
    }
  }
  let examples = 0;
  for (const [parts, schema] of schemaLocations(doc)) {
    for (const [at, i, example] of schemaExamples(schema, parts, [])) {
      examples += 1;
      let validate;
      try {
        validate = compile(at);
      } catch (e) {
        errors.push({ where: `${pointer(at)}/examples/${i}`, error: String(e.message ?? e) });
        continue;
      }
      if (!validate(example)) {
        errors.push({ where: `${pointer(at)}/examples/${i}`, example, errors: validate.errors });
      }
    }
  }
  let replies = 0;
  if (repliesFile) {
    for (const reply of JSON.parse(readFileSync(repliesFile, "utf8"))) {
      replies += 1;
      const what = `${reply.method} ${reply.path} ${reply.status}`;
      const template = findPath(doc, reply.path);
      let method = reply.method.toLowerCase();
      if (template && !doc.paths[template][method] && reply.status === 405) {
        // a method the path does not serve: the 405 every operation of the path declares
        method = METHODS.find((m) => doc.paths[template][m]);
      }
      const op = template && doc.paths[template][method];
      if (!op) {
        errors.push({ reply: what, error: "no such operation in the document" });
        continue;
      }
      const code = String(reply.status) in op.responses ? String(reply.status) : "default";
      let response = op.responses[code];
      if (!response) {
        errors.push({ reply: what, error: "status not declared for the operation" });
        continue;
      }
      let responseParts = ["paths", template, method, "responses", code];
      if (response.$ref) {
        responseParts = response.$ref.slice(2).split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
        response = resolve(doc, response.$ref);
      }
      const headers = Object.fromEntries(
        Object.entries(reply.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]),
      );
      for (const [name, h] of Object.entries(response.headers ?? {})) {
        const value = headers[name.toLowerCase()];
        if (value === undefined) {
          if (h.required) errors.push({ reply: what, error: `required header ${name} missing` });
        } else if (h.schema) {
          const validate = compile([...responseParts, "headers", name, "schema"]);
          if (!validate(value)) errors.push({ reply: what, header: name, value, errors: validate.errors });
        }
      }
      if (method === "head") continue; // no body: its status and headers are checked
      if (reply.body === null || reply.body === undefined) {
        if (response.content) errors.push({ reply: what, error: "no body, but the document declares content" });
        continue;
      }
      const type = (reply.contentType ?? "").split(";")[0].trim();
      if (!response.content || !response.content[type]) {
        errors.push({ reply: what, error: `media type ${type || "(none)"} not declared` });
        continue;
      }
      const validate = compile([...responseParts, "content", type, "schema"]);
      if (!validate(reply.body)) {
        errors.push({ reply: what, body: reply.body, errors: validate.errors });
      }
    }
  }
  process.stdout.write(JSON.stringify({ schemas, examples, replies, errors }, null, 2) + "\n");
  process.exit(errors.length ? 1 : 0);
}

main();
