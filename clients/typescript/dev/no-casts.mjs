// Fails (exit 1) when the client's own TypeScript (src/, test/, examples/; not the generated
// src/schema.ts) has a cast or an `any`: `x as T` (only `as const` is allowed), `<T>x`, a
// non-null assertion `x!`, the `any` type, or a @ts-ignore / @ts-expect-error / @ts-nocheck
// comment. What the types say is then what the decoders checked (src/decode.ts).
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import ts from "typescript";

// The package to check: this one, or the directory given (tests/typescript checks that a cast
// in a scratch package is found).
const root = process.argv[2] ?? process.cwd(); // npm runs it in the package
const DIRS = ["src", "test", "examples"];
const GENERATED = join("src", "schema.ts");

function* files(dir) {
  if (!existsSync(join(root, dir))) return;
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (/\.(m|c)?tsx?$/.test(entry.name) && path !== GENERATED) yield path;
  }
}

const problems = [];
for (const dir of DIRS) {
  for (const path of files(dir)) {
    const text = readFileSync(join(root, path), "utf8");
    const source = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
    const report = (node, what) => {
      const { line, character } = source.getLineAndCharacterOfPosition(node.getStart(source));
      problems.push(`${relative(root, join(root, path))}:${line + 1}:${character + 1}: ${what}`);
    };
    const visit = (node) => {
      if (ts.isAsExpression(node)) {
        const t = node.type;
        const isConst = ts.isTypeReferenceNode(t) && t.typeName.getText(source) === "const";
        if (!isConst) report(node, `cast \`as ${t.getText(source)}\``);
      } else if (ts.isTypeAssertionExpression(node)) {
        report(node, "cast `<T>x`");
      } else if (ts.isNonNullExpression(node)) {
        report(node, "non-null assertion `x!`");
      } else if (node.kind === ts.SyntaxKind.AnyKeyword) {
        report(node, "the `any` type");
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
    for (const m of text.matchAll(/@ts-(ignore|expect-error|nocheck)/g)) {
      const { line } = source.getLineAndCharacterOfPosition(m.index ?? 0);
      problems.push(`${path}:${line + 1}: @ts-${m[1]}`);
    }
  }
}
if (problems.length > 0) {
  console.error(`no-casts: ${problems.length} problem(s):\n${problems.join("\n")}`);
  process.exit(1);
}
console.error("no-casts: no cast, non-null assertion, any or @ts- directive");
