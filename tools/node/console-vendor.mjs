// The console's AG-UI client: what services/gateway/console/vendor/ag-ui-client.js exports.
// `make console-vendor` bundles it (esbuild, pinned in package.json) into that one ESM file,
// which is committed, so the console needs no build step where it is served.
export { EventType, HttpAgent } from "@ag-ui/client";
