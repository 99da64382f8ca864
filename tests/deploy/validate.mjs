// Checks the Kubernetes manifests in deploy/k8s without a cluster:
//   1. every file parses as YAML (every document);
//   2. every object validates against the Kubernetes JSON schema of its apiVersion/kind
//      (kubernetes-models, the published OpenAPI schemas compiled to validators);
//   3. qvl's own rules: probes use /health (readiness) and /livez (liveness) on the named port, every
//      `qvl serve` flag in the container args is one `qvl serve --help` lists, resources are set,
//      the HPA's metric is one /metrics really exports (src/server/http/metrics.c), selectors match labels.
// What it cannot check: that a cluster accepts and runs them (admission, the image, the model
// volume, a metrics adapter for the HPA). docs/DEPLOY.md says so too.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const QVL = resolve(root, process.env.QVL_BIN || "qvl");
let passed = 0, failed = 0;
const check = (cond, what, detail) => {
  if (cond) passed++;
  else { failed++; console.error(`FAIL ${what}${detail !== undefined ? ": " + String(detail).slice(0, 400) : ""}`); }
  return cond;
};

const MODELS = {
  "apps/v1/Deployment": "kubernetes-models/apps/v1/Deployment",
  "apps/v1/StatefulSet": "kubernetes-models/apps/v1/StatefulSet",
  "v1/Service": "kubernetes-models/v1/Service",
  "policy/v1/PodDisruptionBudget": "kubernetes-models/policy/v1/PodDisruptionBudget",
  "autoscaling/v2/HorizontalPodAutoscaler": "kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler",
  "networking.k8s.io/v1/Ingress": "kubernetes-models/networking.k8s.io/v1/Ingress",
};

const help = execFileSync(QVL, ["serve", "--help"], { encoding: "utf8" });
const flags = new Set([...help.matchAll(/(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]));
const metricsSrc = readFileSync(join(root, "src/server/http/metrics.c"), "utf8");

const dir = join(root, "deploy/k8s");
const objects = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  const docs = parseAllDocuments(readFileSync(join(dir, f), "utf8"));
  for (const d of docs) {
    check(d.errors.length === 0, `${f}: parses as YAML`, d.errors.map((e) => e.message).join("; "));
    const o = d.toJS();
    if (o) objects.push({ f, o });
  }
}
check(objects.length >= 6, "deploy/k8s has its objects", objects.length);

for (const { f, o } of objects) {
  const key = `${o.apiVersion}/${o.kind}`;
  const mod = MODELS[key];
  if (!check(!!mod, `${f}: ${key} is a kind this check knows`)) continue;
  const cls = Object.values(await import(mod)).find((v) => typeof v === "function" && v.name === o.kind);
  try {
    new cls(o).validate();
    check(true, `${f}: ${o.kind} ${o.metadata?.name} matches the Kubernetes schema`);
  } catch (e) {
    check(false, `${f}: ${o.kind} ${o.metadata?.name} matches the Kubernetes schema`, e.message);
  }
}

const byKind = (k) => objects.filter(({ o }) => o.kind === k).map(({ o }) => o);
for (const w of [...byKind("Deployment"), ...byKind("StatefulSet")]) {
  const name = `${w.kind} ${w.metadata.name}`;
  const t = w.spec.template;
  const sel = w.spec.selector.matchLabels;
  check(Object.entries(sel).every(([k, v]) => t.metadata.labels?.[k] === v), `${name}: selector matches the pod labels`);
  const c = t.spec.containers.find((x) => x.name === "qvl");
  if (!check(!!c, `${name}: has the qvl container`)) continue;
  const portNames = new Set((c.ports || []).map((p) => p.name));
  check(c.readinessProbe?.httpGet?.path === "/health" && portNames.has(c.readinessProbe.httpGet.port), `${name}: readiness probe on /health`);
  check(c.livenessProbe?.httpGet?.path === "/livez" && portNames.has(c.livenessProbe.httpGet.port), `${name}: liveness probe on /livez`);
  check(c.args[0] === "serve", `${name}: runs qvl serve`);
  for (const a of c.args.slice(1)) {
    const flag = a.split("=")[0];
    check(flags.has(flag), `${name}: ${flag} is a qvl serve flag`, a);
  }
  const threads = Number(c.args.find((a) => a.startsWith("--threads="))?.split("=")[1]);
  check(c.args.some((a) => a.startsWith("--kv-cache-mb=")), `${name}: --kv-cache-mb set (its default follows the node's free memory)`);
  check(Number(c.resources?.requests?.cpu) === threads && c.resources?.limits?.cpu === c.resources?.requests?.cpu,
    `${name}: cpu request = limit = --threads`, JSON.stringify(c.resources));
  check(!!c.resources?.requests?.memory && !!c.resources?.limits?.memory, `${name}: memory request and limit`);
  check(t.spec.terminationGracePeriodSeconds > Number(c.args.find((a) => a.startsWith("--timeout-s="))?.split("=")[1]),
    `${name}: grace period longer than --timeout-s (the drain waits that long)`);
}
for (const h of byKind("HorizontalPodAutoscaler")) {
  for (const m of h.spec.metrics) {
    const n = m.pods?.metric?.name;
    check(n && metricsSrc.includes(`"${n}"`), `HPA metric ${n} is exported by /metrics (src/server/http/metrics.c)`);
  }
  check(objects.some(({ o }) => o.kind === h.spec.scaleTargetRef.kind && o.metadata.name === h.spec.scaleTargetRef.name), "HPA targets a shipped workload");
}
for (const p of byKind("PodDisruptionBudget")) {
  const dep = byKind("Deployment")[0];
  check(Object.entries(p.spec.selector.matchLabels).every(([k, v]) => dep.spec.template.metadata.labels[k] === v), "PDB selects the qvl pods");
}
const svc = byKind("Service").find((s) => s.metadata.name === "qvl");
check(svc?.spec?.sessionAffinity === "ClientIP", "Service qvl has session affinity");

console.log(`deploy: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
