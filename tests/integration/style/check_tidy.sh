#!/bin/bash
# Usage: check_tidy.sh SOURCE_DIR BUILD_DIR [--all]
#
# Runs clang-tidy (the checks of SOURCE_DIR/.clang-tidy) over the repo's own
# C/C++ translation units in BUILD_DIR/compile_commands.json: tracked files
# only, so generated code and build folders never count. Fails on any finding.
#
# The whole tree takes longer than a ctest may on a small machine (--all: 233
# translation units in 24 to 28 minutes on two shared, busy cores, clang-tidy
# 14), so by default it checks what changed since the merge base with
# $CUSHARE_TIDY_BASE (default: main; on that branch itself, its last commit),
# uncommitted changes included: each changed source file, and each file that
# includes a changed header. Files not started within $CUSHARE_TIDY_BUDGET_S
# seconds (200; a file takes about 7 s of a core, more on a loaded machine)
# are named and left, so the ctest ends within its timeout.
# --all (or CUSHARE_TIDY_ALL=1) checks every file.
#
# Every folder of the repo's own C/C++ sources (all swept clean); a new one
# joins the list once `check_tidy.sh SRC BUILD --all` passes with it.
dirs=(node plugin portable samples scheduler shim shm tests tools)
set -u
src=$1
build=$2
all=${CUSHARE_TIDY_ALL:-0}
[ "${3:-}" = "--all" ] && all=1
cd "$src" || exit 2
command -v clang-tidy >/dev/null || { echo "clang-tidy not installed: skipped"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
db=$build/compile_commands.json
[ -f "$db" ] || { echo "no $db (CMAKE_EXPORT_COMPILE_COMMANDS): skipped"; exit 77; }
# The same database without GCC's precompiled header (target_precompile_headers:
# `-include .../cmake_pch.hxx` finds a .gch beside it that clang cannot read, and
# every unit using it failed with "not a valid precompiled PCH file"). The header
# only speeds the build up: each unit includes what it uses.
tidy_db=$(mktemp -d)
trap 'rm -rf "$tidy_db"' EXIT
python3 - "$db" "$tidy_db/compile_commands.json" <<'PY'
import json, shlex, sys
entries = json.load(open(sys.argv[1]))
for e in entries:
    args = e.pop("arguments", None) or shlex.split(e.pop("command"))
    kept, i = [], 0
    while i < len(args):
        if args[i] == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            i += 2
            continue
        if args[i] != "-Winvalid-pch":
            kept.append(args[i])
        i += 1
    e["arguments"] = kept
json.dump(entries, open(sys.argv[2], "w"))
PY

# Translation units of the build that are tracked files of the repo.
mapfile -t units < <(python3 - "$db" "$PWD" "${dirs[@]}" <<'PY'
import json, os, subprocess, sys
db, root = sys.argv[1], sys.argv[2]
tracked = set(subprocess.run(["git", "ls-files", "*.c", "*.cc", "*.cpp"], capture_output=True,
                             text=True, check=True).stdout.split())
seen = set()
dirs = tuple(d + "/" for d in sys.argv[3:])
for entry in json.load(open(db)):
    path = os.path.relpath(os.path.join(entry["directory"], entry["file"]), root)
    if path in tracked and path.startswith(dirs) and path not in seen:
        seen.add(path)
        print(path)
PY
)

if [ "$all" = 1 ]; then
  files=("${units[@]}")
  what="all ${#files[@]} translation units"
else
  base_ref=${CUSHARE_TIDY_BASE:-main}
  base=$(git merge-base HEAD "$base_ref" 2>/dev/null || true)
  if [ -z "$base" ] || [ "$base" = "$(git rev-parse HEAD)" ]; then
    base=$(git rev-parse -q --verify HEAD~1 || git hash-object -t tree /dev/null)
  fi
  mapfile -t changed < <({ git diff --name-only "$base" --; git ls-files --others --exclude-standard; } |
                         sort -u)
  declare -A want=()
  for u in "${units[@]}"; do
    for c in "${changed[@]}"; do
      if [ "$u" = "$c" ]; then want[$u]=1; fi
    done
  done
  for c in "${changed[@]}"; do
    case "$c" in
      *.h | *.hpp)
        [ -f "$c" ] || continue
        for u in "${units[@]}"; do
          grep -q "#include \"$c\"" "$u" 2>/dev/null && want[$u]=1
        done ;;
    esac
  done
  mapfile -t files < <(printf '%s\n' "${!want[@]}" | sed '/^$/d' | sort)
  what="${#files[@]} translation units changed since $(git rev-parse --short "$base")"
fi
if ((${#files[@]} == 0)); then
  echo "clang-tidy: nothing to check ($what)"
  exit 0
fi

# Findings in the repo's own headers (those folders) count too; system,
# third-party and generated headers (under the build folder) do not.
filter="^$PWD/($(IFS='|'; echo "${dirs[*]}"))/"
njobs=$(nproc 2>/dev/null || echo 2)
budget=${CUSHARE_TIDY_BUDGET_S:-200}
logs=$(mktemp -d)
trap 'rm -rf "$logs" "$tidy_db"' EXIT
pids=()
left=()
for i in "${!files[@]}"; do
  if [ "$all" != 1 ] && ((${#pids[@]} && SECONDS >= budget)); then
    left+=("${files[i]}")
    continue
  fi
  while (($(jobs -rp | wc -l) >= njobs)); do wait -n; done
  clang-tidy -p "$tidy_db" --quiet --header-filter="$filter" "${files[i]}" >"$logs/$i" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done  # bash keeps each one's status
if ((${#left[@]})); then
  echo "${#left[@]} of them not checked (past the ${budget} s budget):"
  printf '  %s\n' "${left[@]}"
  what="$what, ${#pids[@]} checked"
fi
grep -hE ': (warning|error): ' "$logs"/* | sort -u
if ((status != 0)) || grep -qE ': (warning|error): ' "$logs"/*; then
  echo "clang-tidy: findings in $what (checks: .clang-tidy)"
  exit 1
fi
echo "clang-tidy: $what clean"
