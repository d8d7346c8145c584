#!/usr/bin/env bash
# Fails when a tracked C++ file differs from .clang-format (Debian's clang-format, installed by
# scripts/install-deps.sh). Fix with: scripts/check-format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check-format: $CLANG_FORMAT not found; run scripts/install-deps.sh (Debian clang-format)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cpp')
if [ "${1:-}" = "--fix" ]; then
  "$CLANG_FORMAT" -i "${files[@]}"
  exit 0
fi
if ! "$CLANG_FORMAT" --dry-run -Werror "${files[@]}" 2>/tmp/check-format.$$; then
  grep -E "^[^ ].*: (error|warning):" /tmp/check-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  /' >&2
  rm -f /tmp/check-format.$$
  echo "check-format: the files above differ from .clang-format; run scripts/check-format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/check-format.$$
echo "check-format: ${#files[@]} files follow .clang-format"
