"""Every shell command the docs show runs, or says why it cannot.

Reads README.md and docs/*.md. A fenced block of `sh`, `bash` or `console`,
or any fenced block with `$ ` prompt lines, is a block of commands. The line
before its fence must be a marker (docs/architecture.md, "Commands in the
docs"):

  <!-- doctest: run -->            run it (prompt blocks: the `$ ` lines only)
  <!-- doctest: run; needs: portable -->  only where the build makes portable
                                   libraries (not under sanitizers)
  <!-- doctest: skip: REASON -->   not here, and why (a cluster, docker, root
                                   on the host, a real GPU, ...)

and `<!-- doctest: setup: COMMAND -->` lines just above the marker run
COMMAND first, unseen by readers (the allocation an example assumes).

Each file gets a fresh node: a temp folder holding the checkout's top-level
entries (symlinks; `build` is the build under test), fakegpu's state, a run
dir (`$CUSHARE_RUN_DIR`) with a cushared on it, and `sudo` that just runs its
command. A file's blocks run in order in that folder, each as `bash -e -o
pipefail`. A failing block, an unmarked block or a skip without a reason
fails the test, and so does a fence without a language: commands in one
would go unseen (`text` for diagrams, outputs and synopses).

  doc_commands.py --build-dir BUILD [--source-dir SRC]
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "lib"))
import cushare_test as ct  # noqa: E402

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!-- doctest: (run(?:; needs: (\w+))?|skip:(.*?)|setup:(.*?)) -->\s*$")
SHELLS = ("sh", "bash", "console")
BLOCK_TIMEOUT = 300  # generous: a loaded 2-core machine; nothing here is timed


class Block:
    def __init__(self, path, line, lang, body, indent):
        self.path, self.line, self.lang = path, line, lang
        self.body = textwrap.dedent("\n".join(l[len(indent):] if l.startswith(indent) else l
                                              for l in body))
        self.action, self.reason, self.setup, self.needs = None, "", [], None

    def where(self):
        return f"{self.path}:{self.line}"

    def script(self):
        if not any(l.startswith("$ ") for l in self.body.splitlines()):
            return self.body
        # A prompt block: the commands, with their continuation lines.
        cmds, cont = [], False
        for l in self.body.splitlines():
            if l.startswith("$ ") or cont:
                cmds.append(l[2:] if l.startswith("$ ") and not cont else l)
                cont = l.endswith("\\")
        return "\n".join(cmds)


def bare_fences(path, rel):
    """Opening fences without a language: `path:line` of each."""
    lines = open(path).read().split("\n")
    out, inside = [], False
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if not m:
            continue
        if not inside and m.group(2) == "":
            out.append(f"{rel}:{i + 1}")
        inside = not inside
    return out


def blocks_of(path, rel):
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.groups()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = lines[i + 1:j]
        if lang in SHELLS or any(l.strip().startswith("$ ") for l in body):
            b = Block(rel, i + 1, lang, body, indent)
            k = i - 1
            while k >= 0 and lines[k].strip() == "":
                k -= 1
            mm = MARKER.match(lines[k]) if k >= 0 else None
            if mm and not mm.group(1).startswith("setup:"):
                b.action = "run" if mm.group(1).startswith("run") else "skip"
                b.needs = mm.group(2)
                b.reason = (mm.group(3) or "").strip()
                k -= 1
                while k >= 0 and (sm := MARKER.match(lines[k])) and sm.group(1).startswith("setup:"):
                    b.setup.insert(0, sm.group(4).strip())
                    k -= 1
            out.append(b)
        i = j + 1
    return out


class Sandbox(ct.Node):
    """A node (ct.Node: run dir, fakegpu state, a cushared) plus the folder
    the commands run in."""

    def __init__(self, build, source):
        super().__init__(build)
        self.work = os.path.join(self.tmp, "work")
        os.makedirs(self.work)
        for entry in os.listdir(source):
            if entry in (".git", "build") or entry.startswith("build-"):
                continue
            os.symlink(os.path.join(source, entry), os.path.join(self.work, entry))
        os.symlink(build.dir, os.path.join(self.work, "build"))
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        with open(os.path.join(bindir, "sudo"), "w") as f:
            f.write('#!/bin/sh\n# The docs say sudo for the node\'s run dir; here it is ours.\nexec "$@"\n')
        os.chmod(os.path.join(bindir, "sudo"), 0o755)
        self.env.update({
            "PATH": f"{bindir}:{build.bin}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": self.tmp,
            "TMPDIR": self.tmp,
            "CUSHARE_RUN_DIR": self.run_dir,
        })
        self.start_daemon()

    def run(self, script):
        p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=self.work,
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            return 124, out
        finally:
            try:  # what the block left in the background
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return p.returncode, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir",
                    default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
    ap.add_argument("--only", help="one file, e.g. docs/docker.md")
    ap.add_argument("--portable", default="ON",
                    help="OFF: the build makes no portable libraries (sanitizers)")
    a = ap.parse_args()
    build = ct.Build(a.build_dir)
    files = ["README.md"] + sorted(os.path.relpath(p, a.source_dir)
                                   for p in glob.glob(os.path.join(a.source_dir, "docs", "*.md")))
    if a.only:
        files = [a.only]
    problems, ran, skipped = [], 0, []
    for rel in files:
        for where in bare_fences(os.path.join(a.source_dir, rel), rel):
            problems.append(f"{where}: a fence without a language (sh/bash/console for "
                            f"commands, marked; text for anything else)")
        blocks = blocks_of(os.path.join(a.source_dir, rel), rel)
        for b in blocks:
            if b.action is None:
                problems.append(f"{b.where()}: no <!-- doctest: run --> or "
                                f"<!-- doctest: skip: REASON --> before this block:\n"
                                f"{textwrap.indent(b.body, '    ')}")
            elif b.action == "skip" and not b.reason:
                problems.append(f"{b.where()}: a skip needs a reason")
            elif b.action == "skip":
                skipped.append(f"{b.where()}: {b.reason}")
            elif b.needs not in (None, "portable"):
                problems.append(f"{b.where()}: unknown need '{b.needs}'")
            elif b.needs == "portable" and a.portable != "ON":
                b.action = "skip"
                skipped.append(f"{b.where()}: this build makes no portable libraries")
        runnable = [b for b in blocks if b.action == "run"]
        if not runnable:
            continue
        box = Sandbox(build, a.source_dir)
        try:
            for b in runnable:
                script = "\n".join(b.setup + [b.script()])
                rc, out = box.run(script)
                ran += 1
                status = "ok" if rc == 0 else f"FAILED (exit {rc})"
                print(f"{b.where()}: {status}")
                if rc != 0:
                    problems.append(f"{b.where()}: exit {rc}\n{textwrap.indent(script, '    $ ')}\n"
                                    f"{textwrap.indent(out[-3000:], '    | ')}")
        finally:
            box.close()
    print(f"\n{ran} blocks run, {len(skipped)} not run here:")
    for s in skipped:
        print(f"  {s}")
    if problems:
        print("\n" + "\n\n".join(problems))
        print(f"\nFAIL: {len(problems)} problem(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
