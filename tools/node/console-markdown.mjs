// The console's Markdown renderer and sanitizer: what services/gateway/console/vendor/markdown.js
// exports. `make console-vendor` bundles it (esbuild, versions pinned in package.json) into one
// committed ESM file, as the AG-UI client; console/lib.js decides how they are used.
export { Marked } from "marked";
export { default as DOMPurify } from "dompurify";
