#!/usr/bin/python3
"""deploy/host/install.sh into a staged prefix (--destdir, no root, no systemd).

Checks what an operator installing with --prefix gets: the units start the
binaries under the prefix, every Documentation= names an installed file, and
cushared runs with the installed config (which --check-config accepts, as the
plugin's). A second run keeps edited configs; --dry-run writes nothing.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

from test_checks import check

ARGS = None


def install(*argv, env=None, expect=0):
    full_env = dict(os.environ)
    full_env.pop("DESTDIR", None)
    full_env.update(env or {})
    p = subprocess.run(["bash", ARGS.install_sh, *argv], capture_output=True, text=True, env=full_env,
                       timeout=30)
    check(p.returncode == expect, f"install.sh {' '.join(argv)}: exit {p.returncode}, expected {expect}\n"
                                  f"{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def fake_build(tmp):
    """The files install.sh copies; their content does not matter to it."""
    build = os.path.join(tmp, "build")
    for rel in ("bin/cushared", "bin/cusharectl", "bin/cushare-device-plugin", "lib/libcushare.so"):
        os.makedirs(os.path.dirname(os.path.join(build, rel)), exist_ok=True)
        with open(os.path.join(build, rel), "w") as f:
            f.write("#!/bin/sh\n")
    return build


def unit_settings(path):
    settings = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "[")) and "=" in line:
                key, value = line.split("=", 1)
                settings.setdefault(key, []).append(value)
    return settings


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--install-sh", required=True)
    parser.add_argument("--daemon")
    parser.add_argument("--plugin")
    ARGS = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="host-install-")
    try:
        build = fake_build(tmp)
        dest = os.path.join(tmp, "stage")
        prefix = "/opt/cushare"
        out = install("--build-dir", build, "--prefix", prefix, "--destdir", dest, "--with-plugin")
        check(f"installed under {dest}{prefix}" in out, f"install.sh output:\n{out}")
        for rel in ("bin/cushared", "bin/cusharectl", "bin/cushare-device-plugin", "lib/cushare/libcushare.so"):
            check(os.path.isfile(dest + prefix + "/" + rel), f"{prefix}/{rel} not installed")
        check(not os.path.exists(os.path.join(dest, "usr")), "something went to /usr/local despite --prefix")

        units = os.path.join(dest, "etc/systemd/system")
        for unit, binary in (("cushared.service", "cushared"),
                             ("cushare-device-plugin.service", "cushare-device-plugin")):
            path = os.path.join(units, unit)
            check(os.path.isfile(path), f"{unit} not installed")
            text = open(path).read()
            check("/usr/local" not in "\n".join(l for l in text.splitlines() if not l.startswith("#")),
                  f"{unit} still names /usr/local:\n{text}")
            s = unit_settings(path)
            exec_start = s["ExecStart"][0].split()
            check(exec_start[0] == f"{prefix}/bin/{binary}", f"{unit}: ExecStart={s['ExecStart'][0]}")
            check(os.path.isfile(dest + exec_start[0]), f"{unit}: {exec_start[0]} is not installed")
            for doc in s.get("Documentation", []):
                for url in doc.split():
                    check(url.startswith("file://"), f"{unit}: Documentation={url} is not a file")
                    check(os.path.isfile(dest + url[len("file://"):]), f"{unit}: {url} is not installed")
            check(s.get("Documentation"), f"{unit} has no Documentation=")
            config = exec_start[exec_start.index("--config") + 1]
            check(os.path.isfile(dest + config), f"{unit}: --config {config} is not installed")

        daemon_args = unit_settings(os.path.join(units, "cushared.service"))["ExecStart"][0].split()[1:]
        config = dest + daemon_args[daemon_args.index("--config") + 1]
        with open(config) as f:
            settings = json.load(f)
        check(settings.get("metrics_addr") == "127.0.0.1:9410", f"cushared.json: {settings}")
        check("--metrics-addr" not in daemon_args, "a --metrics-addr flag in the unit would override the config")
        plugin_config = json.load(open(os.path.join(dest, "etc/cushare/plugin.json")))
        check(plugin_config["libraryHostPath"] == f"{prefix}/lib/cushare/libcushare.so",
              f"plugin.json libraryHostPath: {plugin_config['libraryHostPath']}")
        check(plugin_config["libraryContainerPath"] == "/usr/local/lib/cushare/libcushare.so",
              "the library's path inside containers moved with the host prefix")
        if ARGS.daemon:
            # The unit's own arguments, with its paths taken from the stage.
            staged = {"/var/run/cushare": os.path.join(tmp, "run"), config[len(dest):]: config}
            args = [staged.get(a, a) for a in daemon_args]
            p = subprocess.run([ARGS.daemon, *args, "--check-config"], capture_output=True, text=True, timeout=10)
            check(p.returncode == 0 and "metrics 127.0.0.1:9410" in p.stdout,
                  f"cushared refuses the installed config: {p.stdout} {p.stderr}")
        if ARGS.plugin:
            p = subprocess.run([ARGS.plugin, "--config", os.path.join(dest, "etc/cushare/plugin.json"),
                                "--check-config"], capture_output=True, text=True, timeout=10)
            check(p.returncode == 0, f"the plugin refuses the installed plugin.json: {p.stdout} {p.stderr}")

        # Again, over an edited config: idempotent, the edit stays. DESTDIR works as --destdir.
        settings["log_level"] = "debug"
        with open(config, "w") as f:
            json.dump(settings, f)
        install("--build-dir", build, "--prefix", prefix, "--with-plugin", env={"DESTDIR": dest})
        check(json.load(open(config))["log_level"] == "debug", "a second install overwrote the edited config")

        dry = os.path.join(tmp, "dry")
        out = install("--build-dir", build, "--prefix", prefix, "--destdir", dry, "--dry-run")
        check(not os.path.exists(dry), "--dry-run wrote files")
        check("cushared.service" in out, f"--dry-run output:\n{out}")
        for bad in (["--prefix", "opt"], ["--prefix", "/opt/my prefix"], ["--destdir", "stage"], ["--prefix"]):
            out = install("--build-dir", build, *bad, expect=2)
            check("install.sh:" in out, f"install.sh {bad}: {out}")
        print(f"ok: units under {prefix}, docs and configs installed")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
