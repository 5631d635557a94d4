"""Check results and the report files (report.json, report.md).

A check holds measurements; each measurement has an expectation, a measured
value and a verdict (True, False, or None when it is informational or could
not be taken). A check's status follows from them:

- skip:  the check did not run (reason says why: framework missing, no GPU...)
- error: the orchestration failed (timeout, a worker crashed before measuring)
- fail:  at least one judged measurement missed its expectation
- pass:  at least one measurement was judged and none failed
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

SCHEMA = "cushare-gpu-report/1"
STATUSES = ("pass", "fail", "skip", "error")


@dataclasses.dataclass
class Measurement:
    name: str
    expected: str
    measured: Any
    ok: Optional[bool]
    unit: str = ""
    note: str = ""

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class CheckResult:
    id: str
    title: str
    status: str = "skip"
    reason: str = ""
    measurements: List[Measurement] = dataclasses.field(default_factory=list)
    details: Dict[str, Any] = dataclasses.field(default_factory=dict)
    duration_s: float = 0.0
    framework: str = ""

    def measure(self, name, expected, measured, ok, unit="", note=""):
        m = Measurement(name, expected, measured, None if ok is None else bool(ok), unit, note)
        self.measurements.append(m)
        return m

    def skip(self, reason: str) -> "CheckResult":
        self.status, self.reason = "skip", reason
        return self

    def error(self, reason: str) -> "CheckResult":
        self.status, self.reason = "error", reason
        return self

    def settle(self) -> "CheckResult":
        """Derives the status from the measurements unless skip/error was set."""
        if self.status in ("skip", "error") and self.reason:
            return self
        judged = [m for m in self.measurements if m.ok is not None]
        failed = [m.name for m in judged if not m.ok]
        if failed:
            self.status, self.reason = "fail", "missed: " + ", ".join(failed)
        elif judged:
            self.status, self.reason = "pass", ""
        else:
            self.status = "error"
            self.reason = "no measurement could be judged"
        return self

    def to_json(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "framework": self.framework,
            "status": self.status,
            "reason": self.reason,
            "duration_s": round(self.duration_s, 3),
            "measurements": [m.to_json() for m in self.measurements],
            "details": self.details,
        }


def summarize(checks: List[CheckResult]) -> Dict[str, Any]:
    counts = {s: sum(1 for c in checks if c.status == s) for s in STATUSES}
    if counts["fail"] or counts["error"]:
        verdict = "fail"
    elif counts["pass"]:
        verdict = "pass"
    else:
        verdict = "skipped"
    return dict(counts, verdict=verdict, total=len(checks))


def exit_code(summary: Dict[str, Any]) -> int:
    """0: everything that ran passed; 1: a failure; 3: nothing could run."""
    return {"pass": 0, "fail": 1}.get(summary["verdict"], 3)


def build_report(meta: Dict[str, Any], checks: List[CheckResult]) -> Dict[str, Any]:
    report = {"schema": SCHEMA}
    report.update(meta)
    report["checks"] = [c.to_json() for c in checks]
    report["summary"] = summarize(checks)
    return report


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _cell(text: Any) -> str:
    return _fmt(text).replace("|", "\\|").replace("\n", " ")


_ICON = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}


def render_markdown(report: Dict[str, Any]) -> str:
    s = report["summary"]
    gpu = report.get("gpu") or {}
    lines = [
        "# cushare GPU acceptance report",
        "",
        f"Verdict: **{s['verdict'].upper()}** — {s['pass']} passed, {s['fail']} failed, "
        f"{s['error']} errors, {s['skip']} skipped (of {s['total']}).",
        "",
    ]
    if report.get("fatal"):
        lines += [f"**Fatal:** {report['fatal']}", ""]
    lines += [
        "| | |",
        "|---|---|",
        f"| started | {_cell(report.get('started'))} |",
        f"| duration | {_cell(report.get('duration_s'))} s |",
        f"| GPU | {_cell(gpu.get('name'))} ({_cell(gpu.get('uuid'))}) |",
        f"| simulated (fakegpu) | {_cell(gpu.get('simulated'))} |",
        f"| memory | {_cell(gpu.get('memory_total'))} bytes |",
        f"| driver / CUDA | {_cell(gpu.get('driver_version'))} / {_cell(gpu.get('cuda_driver_version'))} |",
        f"| build | {_cell((report.get('build') or {}).get('dir'))} |",
    ]
    if gpu.get("reason"):
        lines.append(f"| GPU detection | {_cell(gpu.get('reason'))} |")
    for name, fw in sorted((report.get("frameworks") or {}).items()):
        state = fw.get("version") if fw.get("available") else "missing: " + str(fw.get("reason"))
        lines.append(f"| {name} | {_cell(state)} |")
    lines += ["", "## Checks", "", "| # | check | status | reason |", "|---|---|---|---|"]
    for c in report["checks"]:
        lines.append(
            f"| {c['id']} | {_cell(c['title'])} | {_ICON.get(c['status'], c['status'])} | {_cell(c['reason'])} |"
        )
    for c in report["checks"]:
        lines += ["", f"### {c['id']} {c['title']} — {_ICON.get(c['status'], c['status'])}", ""]
        if c["reason"]:
            lines += [f"{c['reason']}", ""]
        if c["measurements"]:
            lines += ["| measurement | expected | measured | ok | note |", "|---|---|---|---|---|"]
            for m in c["measurements"]:
                ok = {True: "yes", False: "**NO**", None: "—"}[m["ok"]]
                measured = _fmt(m["measured"]) + (f" {m['unit']}" if m["unit"] else "")
                lines.append(
                    f"| {_cell(m['name'])} | {_cell(m['expected'])} | {_cell(measured)} | {ok} | {_cell(m['note'])} |"
                )
    cleanup = report.get("cleanup") or {}
    if cleanup:
        lines += ["", "## Cleanup", "", "```", json.dumps(cleanup, indent=2, sort_keys=True), "```"]
    return "\n".join(lines) + "\n"


def write_report(out_dir: str, report: Dict[str, Any]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    tmp = os.path.join(out_dir, ".report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
    os.replace(tmp, os.path.join(out_dir, "report.json"))
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(render_markdown(report))
