#!/bin/bash
# Usage: check_format.sh SOURCE_DIR — every tracked C/C++ file must be
# clang-formatted; prints the files that are not and the command that fixes them.
set -u
cd "$1" || exit 2
command -v clang-format >/dev/null || { echo "clang-format not installed: skipped"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipped"; exit 77; }
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp')
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "not clang-formatted (${#bad[@]} of ${#files[@]} files):"
  printf '  %s\n' "${bad[@]}"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
echo "${#files[@]} files clang-formatted"
