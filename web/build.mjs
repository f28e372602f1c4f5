// Bundles the dashboard into dist/app.js and dist/app.css (minified, no source maps, no CDN:
// everything the page loads is served by the agent from the binary).
//   node build.mjs [OUT_DIR] [NODE_MODULES_DIR] [WEB_DIR]
// web/CMakeLists.txt runs a copy of it in the build tree, beside that tree's node_modules, so
// the source tree stays clean.
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] || path.join(here, "dist");
const nodeModules = process.argv[3] || path.join(here, "node_modules");
const web = process.argv[4] || here;

await esbuild.build({
  entryPoints: { app: path.join(web, "src", "main.js") },
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  outdir: out,
  nodePaths: [nodeModules],
  loader: { ".css": "css" },
  legalComments: "none",
  logLevel: "warning",
});
