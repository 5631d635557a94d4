// Offline validation of the cushare Kubernetes manifests (ctest plugin.k8s_manifests):
//   node validate.mjs --modules <dir with node_modules> --kustomize <dir> --plugin <bin> [files...]
// 1. renders <dir> with `kubectl kustomize` and reads every extra YAML file;
// 2. validates each object against the Kubernetes OpenAPI schema with the
//    kubernetes-models validators (types, required fields, formats; note that
//    they accept unknown fields, so a typo in an optional field name is
//    caught only by the checks of step 3 where it matters);
// 3. checks what cushare relies on: the DaemonSet's hostPID, mounts and
//    containers, the example pod's cushare.io/vgpu request, and the plugin's
//    ConfigMap passing `cushare-device-plugin --check-config`.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  if (i < 0 || i + 1 >= args.length) throw new Error(`missing ${name}`);
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const modules = opt("--modules");
const kustomizeDir = opt("--kustomize");
const plugin = opt("--plugin");
const extraFiles = args;
const require = createRequire(join(modules, "package.json"));
const YAML = require("yaml");

const failures = [];
const fail = (what) => failures.push(what);

function render(dir) {
  const r = spawnSync("kubectl", ["kustomize", dir], { encoding: "utf8" });
  if (r.error) throw new Error(`kubectl: ${r.error.message} (install kubernetes-client)`);
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir} failed: ${r.stderr}`);
  return r.stdout;
}

function parseAll(text, source) {
  return YAML.parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length) fail(`${source}: YAML error ${d.errors[0].message}`);
      return d.toJS();
    })
    .filter((o) => o !== null)
    .map((o) => ({ source, object: o }));
}

function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${kind}` : `kubernetes-models/${version}/${kind}`;
  try {
    return require(path)[kind];
  } catch (e) {
    return null;
  }
}

const objects = parseAll(render(kustomizeDir), `kustomize ${kustomizeDir}`);
for (const f of extraFiles) objects.push(...parseAll(readFileSync(f, "utf8"), f));

for (const { source, object } of objects) {
  const name = `${source}: ${object.kind}/${object.metadata?.name}`;
  const Model = modelFor(object.apiVersion ?? "", object.kind ?? "");
  if (!Model) {
    fail(`${name}: unknown apiVersion/kind ${object.apiVersion}/${object.kind}`);
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`valid   ${name}`);
  } catch (e) {
    fail(`${name}: ${e.message}`);
  }
}

// ---- what cushare relies on -------------------------------------------------
const find = (kind, pred = () => true) => objects.map((o) => o.object).filter((o) => o.kind === kind && pred(o));
const [ds] = find("DaemonSet");
if (!ds) {
  fail("no DaemonSet");
} else {
  const pod = ds.spec.template.spec;
  if (pod.hostPID !== true) fail("DaemonSet: hostPID must be true (cushared maps PIDs)");
  const names = pod.containers.map((c) => c.name).sort().join(",");
  if (names !== "cushared,device-plugin") fail(`DaemonSet containers are ${names}`);
  if (!(pod.initContainers ?? []).some((c) => c.volumeMounts?.some((m) => m.name === "host-lib"))) {
    fail("DaemonSet: an init container must install the library onto the host");
  }
  const hostPath = (v) => pod.volumes.find((x) => x.name === v)?.hostPath?.path;
  for (const c of pod.containers) {
    for (const m of c.volumeMounts ?? []) {
      if (!pod.volumes.some((v) => v.name === m.name)) fail(`${c.name}: mount of unknown volume ${m.name}`);
    }
    const run = (c.volumeMounts ?? []).find((m) => m.name === "run-dir");
    if (!run) fail(`${c.name}: the run dir is not mounted`);
    else if (run.mountPath !== hostPath("run-dir")) {
      fail(`${c.name}: run dir must be mounted at its host path ${hostPath("run-dir")}`);
    }
  }
  const dp = pod.containers.find((c) => c.name === "device-plugin");
  if (dp && !dp.volumeMounts.some((m) => m.mountPath === "/var/lib/kubelet/device-plugins" &&
                                         hostPath(m.name) === "/var/lib/kubelet/device-plugins")) {
    fail("device-plugin: /var/lib/kubelet/device-plugins not mounted from the host");
  }
  const svc = find("Service")[0];
  const labels = ds.spec.template.metadata.labels;
  if (!svc || !Object.entries(svc.spec.selector).every(([k, v]) => labels[k] === v)) {
    fail("the metrics Service does not select the DaemonSet's pods");
  }
}
// hostPID and hostPath volumes (and privileged) are refused by the baseline
// and restricted Pod Security levels: the namespace must say it allows them.
const ns = find("Namespace", (n) => n.metadata.name === "cushare-system")[0];
if (ns?.metadata?.labels?.["pod-security.kubernetes.io/enforce"] !== "privileged") {
  fail("Namespace cushare-system: label pod-security.kubernetes.io/enforce=privileged missing");
}
const vgpuPods = find("Pod", (p) =>
  p.spec.containers.some((c) => String(c.resources?.limits?.["cushare.io/vgpu"]) === "25"));
if (vgpuPods.length === 0) fail("no example pod requesting cushare.io/vgpu: 25");

const [cm] = find("ConfigMap", (c) => c.data?.["plugin.json"]);
if (!cm) {
  fail("no ConfigMap with plugin.json");
} else {
  const dir = mkdtempSync(join(tmpdir(), "cushare-k8s-"));
  try {
    const file = join(dir, "plugin.json");
    writeFileSync(file, cm.data["plugin.json"]);
    const r = spawnSync(plugin, ["--check-config", "--config", file], { encoding: "utf8" });
    if (r.status !== 0) fail(`plugin.json rejected: ${r.stderr || r.error}`);
    else console.log(`valid   ConfigMap/${cm.metadata.name} plugin.json (${r.stdout.trim()})`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (failures.length) {
  for (const f of failures) console.error(`FAIL    ${f}`);
  process.exit(1);
}
console.log(`${objects.length} objects valid`);
