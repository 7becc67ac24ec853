// Regenerates src/schema.ts, the TypeScript types of the coordinator's OpenAPI document.
//
//   node dev/generate.mjs SOURCE [OUT]     (npm run generate -- SOURCE [OUT])
//
// SOURCE: the live document (`http://127.0.0.1:8787/openapi.json`) or a file holding it
// (`make ts-schema` writes one from `python -m coordinator.http.openapi`); OUT defaults to
// src/schema.ts. The drift test (tests/typescript/test_typescript_client.py) runs this very
// script against a live coordinator into a temp dir and compares the result with the
// checked-in file, so both always use the same pinned openapi-typescript and options.
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";
import ts from "typescript";

const HEADER =
  COMMENT_HEADER +
  "// Generated from the coordinator's GET /openapi.json by dev/generate.mjs\n" +
  "// (openapi-typescript, pinned in package-lock.json). Do not edit: run `make ts-schema`.\n\n";

async function load(source) {
  if (/^https?:\/\//.test(source)) {
    const res = await fetch(source, { signal: AbortSignal.timeout(30_000) });
    if (!res.ok) throw new Error(`${source}: HTTP ${res.status}`);
    return JSON.parse(await res.text());
  }
  return JSON.parse(await readFile(source, "utf8"));
}

// The document's JsonValue (a receipt payload's values) refers to itself through its array
// branch. openapi-typescript writes it as components["schemas"]["JsonValue"][], which
// TypeScript refuses as a circular property type (TS2502); a top-level type alias may be
// recursive, so the component is emitted as a reference to this alias instead.
const JSON_VALUE = "#/components/schemas/JsonValue";
const JSON_VALUE_ALIAS =
  "/** A JSON value (the document's JsonValue schema: see dev/generate.mjs). */\n" +
  "export type JsonValue = null | boolean | string | number | JsonValue[] | {\n" +
  "    [key: string]: JsonValue;\n};\n";

export async function generate(source) {
  let aliased = false;
  const ast = await openapiTS(await load(source), {
    silent: true,
    postTransform(type, options) {
      if (options.path !== JSON_VALUE) return undefined;
      aliased = true;
      return ts.factory.createTypeReferenceNode("JsonValue");
    },
  });
  return HEADER + (aliased ? JSON_VALUE_ALIAS : "") + astToString(ast);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [source, out = "src/schema.ts"] = process.argv.slice(2); // npm runs it in the package
  if (!source) {
    console.error("usage: node dev/generate.mjs SOURCE [OUT] (SOURCE: a URL or a file)");
    process.exit(2);
  }
  await writeFile(out, await generate(source), "utf8");
  console.error(`wrote ${out}`);
}
