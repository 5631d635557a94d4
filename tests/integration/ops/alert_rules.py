"""The shipped alert rules and dashboard (deploy/monitoring) against what a
live cushared exports: a daemon on fakegpu with two allocations is scraped,
the scrape becomes promtool's input series (each real series, with the job
and instance labels Prometheus adds, on a timeline that makes one allocation
misbehave and keeps the other quiet), and `promtool check rules` + `promtool
test rules` must pass. A renamed metric or label, a rule that splits an
allocation or one that fires for the quiet allocation fails it.

Every dashboard query becomes an `absent(...)` alert that must not fire: each
panel shows data for the real series.

  alert_rules.py --build-dir BUILD
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MONITORING = os.path.join(HERE, "..", "..", "..", "deploy", "monitoring")
GROUP_BY = ("namespace", "pod", "container", "allocation")
STEPS = 40  # minutes of input series, one sample a minute


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def parse(text):
    from prometheus_client.parser import text_string_to_metric_families
    samples = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            samples.append((s.name, dict(s.labels), s.value))
    return samples


def series(name, labels):
    # Prometheus stores no empty label: `pod=""` is no pod label at all.
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v != "")
    return f"{name}{{{inner}}}"


def values(points):
    """promtool's expanding notation from (count, start, step) runs."""
    return " ".join(f"{start}+{step}x{count - 1}" for count, start, step in points)


def timeline(name, alloc, bad, value):
    """The input values of one scraped series over STEPS minutes. The bad
    allocation is refused by its quota from minute 10, has a process killed
    at minute 20, and from the start gets 10 % of the GPU against 30 %
    entitled while waiting at its gate half the time; everything else keeps
    the scraped value (the quiet allocation: achieved = entitled)."""
    if alloc == bad:
        if name == "cushare_oom_refusals_total":
            return values([(10, value, 0), (STEPS - 10, value + 3, 0)])
        if name == "cushare_over_quota_kills_total":
            return values([(20, value, 0), (STEPS - 20, value + 1, 0)])
        if name == "cushare_share_target_ratio":
            return values([(STEPS, 0.3, 0)])
        if name == "cushare_share_achieved_ratio":
            return values([(STEPS, 0.1, 0)])
        if name == "cushare_throttled_seconds_total":
            return values([(STEPS, value, 30)])
    if name == "cushare_share_target_ratio" or name == "cushare_share_achieved_ratio":
        return values([(STEPS, 0.5, 0)])
    if name == "cushare_memory_quota_bytes" and value == 0:
        value = 1 << 30
    return values([(STEPS, value, 0)])


def rule_annotations(rules_doc):
    out = {}
    for g in rules_doc["groups"]:
        for r in g["rules"]:
            out[r["alert"]] = (r.get("labels", {}), r.get("annotations", {}))
    return out


def render(template, labels):
    # The shipped annotations use only {{ $labels.NAME }} (checked here), so
    # the expected text follows from the labels alone.
    rest = re.sub(r"\{\{ \$labels\.(\w+) \}\}", "", template)
    ct.check("{{" not in rest, f"annotation uses more than $labels: {template!r}")
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def expected(rules, alert, labels):
    static, annotations = rules[alert]
    return {"exp_labels": {**labels, **static},
            "exp_annotations": {k: render(v, labels) for k, v in annotations.items()}}


def dashboard_rules(path):
    """One absent() alert per dashboard query, template variables filled as
    'All' would fill them."""
    with open(path) as f:
        dash = json.load(f)
    exprs = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            e = target["expr"].replace("$__rate_interval", "5m")
            e = re.sub(r'=~"\$\w+"', '=~".*"', e)
            ct.check("$" not in e, f"unfilled variable in {target['expr']}")
            exprs.append((panel["title"], e))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", v["query"]["query"])
            ct.check(m is not None, f"variable {v['name']}: {v['query']}")
            sel = re.sub(r'=~"\$\w+"', '=~".*"', m.group(1))
            exprs.append((f"variable {v['name']}", sel))
    rules = [{"alert": f"DashboardQueryEmpty{i}", "expr": f"absent({e})",
              "annotations": {"panel": title}} for i, (title, e) in enumerate(exprs)]
    return {"groups": [{"name": "dashboard", "rules": rules}]}, len(rules)


def yaml_dump(doc):
    # JSON is YAML: no PyYAML needed.
    return json.dumps(doc, indent=1)


def load_yaml(path):
    import yaml  # python3-yaml
    with open(path) as f:
        return yaml.safe_load(f)


def promtool(*args, cwd):
    r = subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    print(f"$ promtool {' '.join(args)}\n{r.stdout}{r.stderr}".rstrip())
    ct.check(r.returncode == 0, f"promtool {args[0]} {args[1]} failed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    if shutil.which("promtool") is None:
        ct.skip_or_fail("promtool is not installed (Debian package prometheus)")
    b = ct.Build(a.build_dir)
    rules_path = os.path.join(MONITORING, "alerts.yaml")
    try:
        rules = rule_annotations(load_yaml(rules_path))
        with ct.Node(b) as node:
            port = free_port()
            node.start_daemon("--metrics-addr", f"127.0.0.1:{port}")
            node.create("team-a", "--memory-limit", "1Gi", "--compute-limit", "30", "--mode",
                        "capped")
            node.create("team-b", "--memory-limit", "2Gi", "--compute-limit", "50")
            deadline = time.monotonic() + 30
            while True:
                text = scrape(port)
                allocs = {l.get("allocation") for n, l, v in parse(text)}
                if {"team-a", "team-b"} <= allocs:
                    break
                ct.check(time.monotonic() < deadline, f"allocations not in the scrape:\n{text}")
                time.sleep(0.1)
            samples = parse(text)
            instance = f"127.0.0.1:{port}"
            # Down: the scrape that Prometheus would make now fails.
            node.daemon.stop(timeout=30)
            try:
                scrape(port)
                raise ct.Failure("the daemon still answers after it stopped")
            except OSError:
                pass
            work = os.path.join(node.tmp, "promtool")
            os.makedirs(work)
            run_tests(rules, samples, instance, work, rules_path)
    except ct.Failure as f:
        print(f"FAIL: {f}")
        return 1
    print("PASS")
    return 0


def run_tests(rules, samples, instance, work, rules_path):
    job = {"job": "cushare", "instance": instance}
    tenant_names = {n for n, l, v in samples if "allocation" in l}
    for needed in ("cushare_oom_refusals_total", "cushare_over_quota_kills_total",
                   "cushare_share_target_ratio", "cushare_share_achieved_ratio",
                   "cushare_throttled_seconds_total", "cushare_usage_region_valid"):
        ct.check(needed in tenant_names, f"{needed} is not in the scrape: {sorted(tenant_names)}")
    inputs = []
    alloc_labels = {}
    for name, labels, value in samples:
        alloc = labels.get("allocation")
        if alloc is not None:
            alloc_labels[alloc] = {k: labels[k] for k in GROUP_BY if labels.get(k)}
        inputs.append({"series": series(name, {**labels, **job}),
                       "values": timeline(name, alloc, "team-a", value)})
    bad, quiet = alloc_labels["team-a"], alloc_labels["team-b"]
    up = series("up", job)
    alive = inputs + [{"series": up, "values": values([(STEPS, 1, 0)])}]

    def test(at, firing):
        """Every alert of the file at `at`: those in `firing` with their
        labels, the others silent."""
        return [{"eval_time": at, "alertname": name,
                 "exp_alerts": [expected(rules, name, l) for l in firing.get(name, [])]}
                for name in sorted(rules)]

    dash, n_dash = dashboard_rules(os.path.join(MONITORING, "grafana-dashboard.json"))
    with open(os.path.join(work, "dashboard.yaml"), "w") as f:
        f.write(yaml_dump(dash))
    shutil.copy(rules_path, os.path.join(work, "alerts.yaml"))
    doc = {
        "rule_files": ["alerts.yaml", "dashboard.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {"name": "live series: one allocation misbehaves, the other stays quiet",
             "interval": "1m", "input_series": alive,
             "alert_test_cases_placeholder": None},
            {"name": "the daemon stops answering",
             "interval": "1m",
             "input_series": [{"series": up, "values": values([(5, 1, 0), (STEPS - 5, 0, 0)])}],
             "alert_rule_test": test("4m", {}) + test("6m", {}) +
             test("8m", {"CushareDaemonDown": [job]})},
            {"name": "no daemon scraped at all",
             "interval": "1m",
             "input_series": [{"series": series("cushare_allocations", job),
                               "values": values([(STEPS, 0, 0)])}],
             "alert_rule_test": [
                 {"eval_time": "5m", "alertname": "CushareNoDaemonTargets", "exp_alerts": []},
                 {"eval_time": "11m", "alertname": "CushareNoDaemonTargets",
                  "exp_alerts": [expected(rules, "CushareNoDaemonTargets", {"job": "cushare"})]}]},
        ],
    }
    first = doc["tests"][0]
    del first["alert_test_cases_placeholder"]
    # Minute 5: nothing yet (the share has been short only 5 minutes).
    # Minute 12: refusals in the last 5 minutes; short for 10+ minutes.
    # Minute 22: a kill in the last 15 minutes, no new refusal.
    first["alert_rule_test"] = (
        test("5m", {}) +
        test("12m", {"CushareQuotaRefusals": [bad], "CushareShareBelowEntitlement": [bad]}) +
        test("22m", {"CushareOverQuotaKills": [bad], "CushareShareBelowEntitlement": [bad]}) +
        [{"eval_time": "10m", "alertname": f"DashboardQueryEmpty{i}", "exp_alerts": []}
         for i in range(n_dash)])
    ct.check(quiet != bad, "the two allocations are not told apart")
    with open(os.path.join(work, "tests.yaml"), "w") as f:
        f.write(yaml_dump(doc))
    promtool("check", "rules", "alerts.yaml", "dashboard.yaml", cwd=work)
    promtool("test", "rules", "tests.yaml", cwd=work)
    print(f"{len(inputs)} scraped series, {len(rules)} alerts, {n_dash} dashboard queries")


if __name__ == "__main__":
    sys.exit(main())
