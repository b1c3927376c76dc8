// DOT on stdin, SVG on stdout: Graphviz's dot layout compiled to WebAssembly (Viz.js, from the
// npm registry through docs/hooks/package-lock.json), so the docs build needs no system package.
// Any error or warning from Graphviz fails the render (the docs build is strict).
import { instance } from "@viz-js/viz";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const viz = await instance();
const result = viz.render(Buffer.concat(chunks).toString("utf8"), { format: "svg" });
for (const error of result.errors) console.error(`${error.level ?? "error"}: ${error.message}`);
if (result.status !== "success" || result.errors.length > 0) process.exit(1);
process.stdout.write(result.output);
