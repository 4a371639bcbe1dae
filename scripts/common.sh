# Shared by scripts/test, scripts/demo and scripts/bench: configure and build once.
# Usage: source scripts/common.sh; hearsay_build [cmake targets...]
set -euo pipefail
HEARSAY_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HEARSAY_BUILD=${HEARSAY_BUILD:-$HEARSAY_ROOT/build}
HEARSAY_JOBS=${HEARSAY_JOBS:-$(nproc)}

hearsay_build() {
  cmake -S "$HEARSAY_ROOT" -B "$HEARSAY_BUILD" -DCMAKE_BUILD_TYPE=Release ${HEARSAY_CMAKE_ARGS:-} >"$HEARSAY_BUILD.configure.log" 2>&1 || {
    cat "$HEARSAY_BUILD.configure.log" >&2
    echo "build: cmake configure failed (log above)" >&2
    return 1
  }
  grep -E "hearsay: CUDA backend" "$HEARSAY_BUILD.configure.log" || true
  local args=()
  for t in "$@"; do args+=(--target "$t"); done
  cmake --build "$HEARSAY_BUILD" -j "$HEARSAY_JOBS" "${args[@]}"
}
