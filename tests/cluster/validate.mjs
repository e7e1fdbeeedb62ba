// Schema-checks the objects the cluster helpers generate, with the
// Kubernetes OpenAPI schemas of npm's kubernetes-models: Deployments and
// StatefulSets whole; a numaflow Pipeline's containers, env and volumes with
// the core/v1 schemas they embed (numaflow's CRD is not in kubernetes-models).
// usage: node tests/cluster/validate.mjs OBJECT.json...   (exit 1 on the first invalid one)
import { readFileSync } from "node:fs";

// The package is ESM with an exports map: import its files from devtools/node.
const models = new URL("../../devtools/node/node_modules/kubernetes-models/", import.meta.url);
const { Deployment, StatefulSet } = await import(new URL("apps/v1/index.js", models));
const { Container, Volume, EnvVar } = await import(new URL("v1/index.js", models));

function check(what, fn) {
  try {
    fn();
  } catch (e) {
    console.error(`invalid ${what}: ${e.message}`);
    process.exit(1);
  }
}
for (const file of process.argv.slice(2)) {
  const obj = JSON.parse(readFileSync(file, "utf8"));
  delete obj.status;
  if (obj.kind === "Deployment") check(`${file} (Deployment)`, () => new Deployment(obj).validate());
  else if (obj.kind === "StatefulSet") check(`${file} (StatefulSet)`, () => new StatefulSet(obj).validate());
  else if (obj.kind === "Pipeline") {
    for (const v of obj.spec.vertices) {
      for (const c of [v.udf?.container, v.source?.udsource?.container, v.sink?.udsink?.container].filter(Boolean))
        check(`${file} vertex ${v.name} container`, () => new Container({ name: "c", ...c }).validate());
      for (const vol of v.volumes ?? []) check(`${file} vertex ${v.name} volume`, () => new Volume(vol).validate());
      for (const e of v.containerTemplate?.env ?? []) check(`${file} vertex ${v.name} env`, () => new EnvVar(e).validate());
    }
  } else {
    console.error(`${file}: no schema for kind ${obj.kind}`);
    process.exit(1);
  }
  console.log(`valid: ${file} (${obj.kind})`);
}
