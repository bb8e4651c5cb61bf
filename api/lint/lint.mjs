// Lints ../openapi.yaml: Spectral's spectral:oas ruleset must report
// nothing at all (hints included) and Redocly's recommended ruleset no
// error and no warning. Exits non-zero otherwise, printing what was found.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const contract = path.join(here, "..", "openapi.yaml");
const bin = (name) => path.join(here, "node_modules", ".bin", name);
let failed = false;

const spectral = spawnSync(bin("spectral"), ["lint", "--fail-severity=hint", "--ruleset", path.join(here, ".spectral.yaml"), contract], { encoding: "utf8" });
process.stdout.write(spectral.stdout + spectral.stderr);
if (spectral.status !== 0) {
  console.error("spectral:oas: the contract has problems (see above)");
  failed = true;
}

// Redocly reports usage to its makers unless told not to.
const env = { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" };
const redocly = spawnSync(bin("redocly"), ["lint", "--config", path.join(here, "redocly.yaml"), "--format=json", contract], { encoding: "utf8", env });
let report;
try {
  report = JSON.parse(redocly.stdout);
} catch {
  process.stderr.write(redocly.stdout + redocly.stderr);
  console.error("redocly: no JSON report");
  process.exit(1);
}
const { errors, warnings } = report.totals;
console.log(`redocly recommended: ${errors} errors, ${warnings} warnings`);
for (const p of report.problems) {
  console.error(`  ${p.severity} ${p.ruleId}: ${p.message} at ${p.location?.[0]?.pointer ?? "?"}`);
}
if (errors !== 0 || warnings !== 0) failed = true;
process.exit(failed ? 1 : 0);
