#!/usr/bin/env bash
# memplan on a GPU: a smoke run, a CUPTI profile of a plan, the accuracy table (predicted against
# measured allocated and reserved peaks, unplanned and planned at 75% and 50%), the budget check
# (does each plan measure at or under its budget?) and the peer table (PyTorch eager, checkpoint
# per block, selective activation checkpointing, torch.compile's activation memory budget, and
# memplan planned at each one's peak).
#
# Two sides, for a GPU machine without network or build tools beside its own torch:
#   scripts/gpu-check.sh --bundle [--torch 2.11.0]        on this (CPU) machine
#       builds memplan against that torch (Release, no GUI, tests or benchmarks; the torch's
#       pinned environment, scripts/requirements-torch211.txt for 2.11.0, made by install-deps),
#       and bundles into .gpu/ (ignored, at most 50 MiB): the stripped binary, the Debian
#       libraries it links, the corpus models without their weights (runs use --random-weights)
#       and these scripts.
#   bash .gpu/gpu-check.sh --run [--device cuda|cpu] [--out DIR]     on the GPU machine
#       runs the check with that machine's torch (--python, else /opt/torch/.venv/bin/python, else
#       python3; it must be the version bundled) and packs everything into OUT (at most 8 files:
#       summary.md with every table, log.txt, results.tgz with the plans, runs, profiles, traces).
#   scripts/gpu-check.sh [--torch VERSION]               both, on a GPU machine with network
#
# Options:
#   --torch VERSION     bundle: the torch to build against: 2.11.0 (default) or the pinned one
#   --python PY         bundle: build against the torch of PY instead; run: the device's Python
#   --memplan PATH      bundle: bundle this memplan instead of building one
#   --models LIST       bundle: corpus models to carry (default: the run's models)
#   --models-dir DIR    bundle: take the .onnx files from DIR instead of exporting them
#   --max-mib N         bundle: the size limit (default 50; a memplan with the GUI links Qt,
#                       ~70 MiB more: bundles build without it)
#   --bundle-dir DIR    the bundle (default: .gpu in the repository, or this script's folder
#                       when it runs from a bundle)
#   --device DEV        run: cuda (default), cuda:K or cpu (a dry run: two small models)
#   --out DIR           run: where the results go (default: $OUT, else gpu-check-out)
#   --parts LIST        run: smoke,profile,offload,accuracy,peers,nccl (default: all; the budget check
#                       comes with accuracy; nccl: 2 data-parallel ranks where 2 GPUs are visible)
#   --specs LIST        run: accuracy models as model:batch,... ; --peer-specs likewise for peers
#   --peers LIST        run: eager,checkpoint,sac,compile (cpu: eager,checkpoint,sac)
#   --time-limit S      run: seconds for the whole run (default 480); parts left are skipped
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$HERE/memplan" ] && [ -f "$HERE/bundle.json" ]; then
  ROOT=""; BUNDLE=$HERE  # running from a bundle on the device
else
  ROOT=$(cd "$HERE/.." && pwd); BUNDLE=$ROOT/.gpu
fi
MAX_BUNDLE_MIB=50
MAX_OUT_FILES=8

DO_BUNDLE=0; DO_RUN=0
TORCH=2.11.0; PYTHON=""; MEMPLAN=""; MODELS=""; MODELS_DIR=""
DEVICE=cuda; OUTDIR=${OUT:-}; PARTS=smoke,profile,offload,accuracy,peers,nccl; SPECS=""; PEER_SPECS=""; PEERS=""
TIME_LIMIT=480
die() { echo "gpu-check: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) DO_BUNDLE=1; shift ;;
    --run) DO_RUN=1; shift ;;
    --torch) TORCH=$2; shift 2 ;;
    --python) PYTHON=$2; shift 2 ;;
    --memplan) MEMPLAN=$(realpath "$2"); shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --models-dir) MODELS_DIR=$(realpath "$2"); shift 2 ;;
    --bundle-dir) mkdir -p "$2"; BUNDLE=$(realpath "$2"); shift 2 ;;
    --max-mib) MAX_BUNDLE_MIB=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    --specs) SPECS=$2; shift 2 ;;
    --peer-specs) PEER_SPECS=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --time-limit) TIME_LIMIT=$2; shift 2 ;;
    -h|--help) sed -n 2,37p "$0"; exit 0 ;;
    *) die "unknown argument $1 (try --help)" ;;
  esac
done
if [ $DO_BUNDLE = 0 ] && [ $DO_RUN = 0 ]; then DO_BUNDLE=1; DO_RUN=1; fi  # one step, on a GPU machine

# What the run measures, by device: the GPU tables of shared/gpu/README.md's first check, or a
# dry run on the CPU that goes through the same code in about a minute.
case "$DEVICE" in
  cuda*) SPECS=${SPECS:-resnet18:64,resnet50:64,mobilenet_v2:64,vit_b_16:32,gpt:32,gpt_deep:16,swin_t:32,efficientnet_b0:64,densenet121:32,resnet50_dynamo:64,gpt_dynamo:32}
         PEER_SPECS=${PEER_SPECS:-gpt:32,resnet50:64,vit_b_16:32}
         PEERS=${PEERS:-eager,checkpoint,sac,compile}
         PROFILE_SPEC=resnet50:32; STEPS=3; PEER_STEPS=6 ;;
  cpu)   SPECS=${SPECS:-gpt:4,gpt_dynamo:8}  # small (both exporters); 50% is feasible at these batches
         PEER_SPECS=${PEER_SPECS:-gpt:4}
         PEERS=${PEERS:-eager,checkpoint,sac}
         PROFILE_SPEC=${SPECS%%,*}; STEPS=2; PEER_STEPS=2 ;;
  *) die "--device $DEVICE: cuda, cuda:K or cpu" ;;
esac
spec_models() { echo "$1" | tr ',' '\n' | cut -d: -f1; }
[ -n "$MODELS" ] || MODELS=$( (spec_models "$SPECS"; spec_models "$PEER_SPECS"; spec_models "$PROFILE_SPEC") | sort -u | paste -sd,)

# ---------------------------------------------------------------------------------------------
# The bundle (CPU machine)
bundle() {
  [ -n "$ROOT" ] || die "--bundle runs from the repository, not from a bundle"
  local py=$PYTHON main_py
  main_py=$(bash "$ROOT/scripts/install-deps.sh" --print-venv)/bin/python
  if [ -z "$MEMPLAN" ] && [ -z "$py" ]; then
    # The torch's pinned environment: the main one if it pins that version, else its own file.
    local req=""
    if grep -qx "torch==$TORCH" "$ROOT/scripts/requirements.txt"; then
      req=$ROOT/scripts/requirements.txt
    else
      local mm; mm=$(echo "$TORCH" | cut -d. -f1,2 | tr -d .)
      req=$ROOT/scripts/requirements-torch$mm.txt
      [ -f "$req" ] && grep -qx "torch==$TORCH" "$req" ||
        die "no pinned environment for torch $TORCH (scripts/requirements.txt or $req pinning torch==$TORCH); or pass --python"
    fi
    bash "$ROOT/scripts/install-deps.sh" --requirements "$req" >&2
    py=$(bash "$ROOT/scripts/install-deps.sh" --requirements "$req" --print-venv)/bin/python
  fi
  if [ -z "$MEMPLAN" ]; then
    local version build
    version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])') || die "$py cannot import torch"
    build=$ROOT/build-gpu-torch$(echo "$version" | tr -d .)
    echo "gpu-check: building memplan against torch $version ($py) in $build" >&2
    if [ ! -f "$build/CMakeCache.txt" ]; then
      cmake -S "$ROOT" -B "$build" $(command -v ninja >/dev/null && echo "-G Ninja") -DCMAKE_BUILD_TYPE=Release \
        -DMEMPLAN_PYTHON="$py" -DMEMPLAN_WITH_GUI=OFF -DMEMPLAN_BUILD_TESTS=OFF -DMEMPLAN_BUILD_BENCH=OFF >&2
    fi
    cmake --build "$build" -j "$(nproc)" --target memplan >&2
    MEMPLAN=$build/cli/memplan
  fi
  [ -x "$MEMPLAN" ] || die "no memplan at $MEMPLAN"
  local version_line; version_line=$("$MEMPLAN" --version | grep "LibTorch" | head -1) ||
    die "$MEMPLAN was built without the executor: $("$MEMPLAN" --version | paste -sd' ')"

  # Models: the graph only; its external-data file stays behind (--random-weights draws them).
  if [ -z "$MODELS_DIR" ]; then
    MODELS_DIR=$HOME/.cache/memplan/models-$(cat "$ROOT/scripts/requirements.txt" "$ROOT/samples/export_models.py" | sha256sum | cut -c1-12)
    bash "$ROOT/scripts/install-deps.sh" >&2
    "$main_py" "$ROOT/samples/export_models.py" --out "$MODELS_DIR" --models "$MODELS" >&2
  fi

  rm -rf "$BUNDLE"; mkdir -p "$BUNDLE/lib" "$BUNDLE/lib-cuda" "$BUNDLE/lib-compat" "$BUNDLE/models"
  cp "$MEMPLAN" "$BUNDLE/memplan"; strip "$BUNDLE/memplan"
  # The Debian libraries memplan links, without LibTorch and its CUDA libraries (the device's
  # torch brings them) and glibc's core. libstdc++ and libgcc_s go apart, used only where the
  # device's own are too old to start memplan. libcudart and libcupti: fallbacks, searched after
  # the device torch's.
  local so
  while read -r so; do
    case "$(basename "$so")" in
      libtorch*|libc10*|libshm*|libgomp*|libnv*|libcuda.*|libcublas*|libcudnn*|libnccl*|libcusparse*|libcufft*|libcurand*|libcusolver*|libcufile*|libnvshmem*|libcudart*|libcupti*) ;;
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libresolv.so*|libutil.so*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$so" "$BUNDLE/lib-compat/" ;;
      *) cp -L "$so" "$BUNDLE/lib/" ;;
    esac
  done < <(ldd "$MEMPLAN" | awk '/=> \// {print $3}')
  for so in libcudart.so.13 libcupti.so.13; do
    [ -f "/usr/local/cuda/lib64/$so" ] && cp -L "/usr/local/cuda/lib64/$so" "$BUNDLE/lib-cuda/"
  done
  strip --strip-unneeded "$BUNDLE"/lib/*.so* 2>/dev/null || true
  local m
  for m in $(echo "$MODELS" | tr ',' ' '); do
    [ -f "$MODELS_DIR/$m.onnx" ] || die "no model $m in $MODELS_DIR"
    cp "$MODELS_DIR/$m.onnx" "$BUNDLE/models/"
  done
  cp "$ROOT/scripts/gpu-check.sh" "$ROOT/scripts/gpu_check.py" "$ROOT/samples/export_models.py" "$BUNDLE/"
  local torch_version; torch_version=$(echo "$version_line" | sed -n 's/.*LibTorch \([0-9][0-9.]*\).*/\1/p')
  cat > "$BUNDLE/bundle.json" <<EOF
{"memplan": "$version_line", "torch": "$torch_version", "commit": "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)",
 "made": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "models": "$MODELS", "python": "${py:-}"}
EOF
  local kib; kib=$(du -sk "$BUNDLE" | cut -f1)
  echo "gpu-check: bundle $BUNDLE: $((kib / 1024)) MiB (memplan for LibTorch $torch_version, $(ls "$BUNDLE/lib" | wc -l) libraries, $(ls "$BUNDLE/models" | wc -l) models)"
  [ "$kib" -le $((MAX_BUNDLE_MIB * 1024)) ] || die "the bundle is $((kib / 1024)) MiB, over $MAX_BUNDLE_MIB MiB (fewer --models?)"
}

# ---------------------------------------------------------------------------------------------
# The run (GPU machine, no network)
run_check() {
  [ -f "$BUNDLE/bundle.json" ] || die "no bundle in $BUNDLE (scripts/gpu-check.sh --bundle makes it)"
  local py=$PYTHON
  if [ -z "$py" ]; then
    py=$(sed -n 's/.*"python": "\([^"]*\)".*/\1/p' "$BUNDLE/bundle.json")  # one step: the bundle's own
    [ -n "$py" ] && [ -x "$py" ] || py=/opt/torch/.venv/bin/python
    [ -x "$py" ] || py=python3
  fi
  OUTDIR=${OUTDIR:-gpu-check-out}
  mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
  # Everything is written under $work/results; OUT gets summary.md, log.txt and results.tgz.
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  local R=$work/results; mkdir -p "$R"
  local t0; t0=$(date +%s)
  exec > >(tee "$work/log.txt") 2>&1
  stamp() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
  left() { echo $(( TIME_LIMIT - ($(date +%s) - t0) )); }

  # LibTorch and its CUDA libraries from the device's torch, the bundle's Debian libraries first.
  local torch_lib site libs d
  torch_lib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
    die "$py cannot import torch (--python)"
  site=$(dirname "$(dirname "$torch_lib")")
  libs=$BUNDLE/lib:$torch_lib
  for d in "$site"/nvidia/*/lib "$site"/nvidia/*/*/lib; do [ -d "$d" ] && libs=$libs:$d; done
  export LD_LIBRARY_PATH=$libs:$BUNDLE/lib-cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local M=$BUNDLE/memplan MD=$BUNDLE/models
  if ! "$M" --version >/dev/null 2>&1; then
    export LD_LIBRARY_PATH=$BUNDLE/lib-compat:$LD_LIBRARY_PATH  # the device's libstdc++ is older than the build's
  fi
  stamp "start: $(date -u +%Y-%m-%dT%H:%M:%SZ), time limit $TIME_LIMIT s"
  local gpu torch_version memplan_version bundled
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  torch_version=$("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPU" if torch.cuda.is_available() else "no GPU")')
  memplan_version=$("$M" --version 2>&1 | paste -sd' ') || { ldd "$M" | grep "not found"; die "memplan does not start: $memplan_version"; }
  bundled=$(sed -n 's/.*"torch": "\([^"]*\)".*/\1/p' "$BUNDLE/bundle.json")
  echo "device: ${gpu:-none} | python: $py, torch $torch_version | $memplan_version"
  case "$torch_version" in "$bundled"*) ;; *) echo "gpu-check: WARNING: memplan was built against LibTorch $bundled, the device's torch is $torch_version" ;; esac
  "$py" - "$R/environment.json" "$gpu" "$torch_version" "$memplan_version" "$DEVICE" "$BUNDLE/bundle.json" <<'PYEOF'
import json, sys
out, gpu, torch, memplan, device, bundle = sys.argv[1:]
b = json.load(open(bundle))
json.dump({"device_name": gpu or f"the CPU ({device})", "device": device, "torch": torch, "memplan": memplan,
           "bundle_commit": b.get("commit"), "bundle_made": b.get("made")}, open(out, "w"), indent=1)
PYEOF
  local G="$py $BUNDLE/gpu_check.py" m bs spec
  if [[ ,$PARTS, == *,smoke,* ]]; then
    stamp "smoke: ${SPECS%%,*}"
    spec=${SPECS%%,*}; m=${spec%%:*}
    timeout -k 5 "$(left)" "$M" run "$MD/$m.onnx" --batch "${spec#*:}" --steps "$STEPS" --device "$DEVICE" --random-weights \
      --json "$R/smoke.json" || echo "gpu-check: smoke run failed (exit $?)"
  fi
  if [[ ,$PARTS, == *,profile,* ]] && [ "$(left)" -gt 30 ]; then
    m=${PROFILE_SPEC%%:*}; bs=${PROFILE_SPEC#*:}
    stamp "profile of $m batch $bs planned at 50% (75% where no plan reaches 50%)"
    { timeout -k 5 "$(left)" "$M" plan "$MD/$m.onnx" --batch "$bs" --budget 50% --device "$DEVICE" \
        --json "$R/$m-profile-plan.json" >/dev/null ||
      timeout -k 5 "$(left)" "$M" plan "$MD/$m.onnx" --batch "$bs" --budget 75% --device "$DEVICE" \
        --json "$R/$m-profile-plan.json" >/dev/null; } &&
    timeout -k 5 "$(left)" "$M" run "$MD/$m.onnx" --batch "$bs" --plan "$R/$m-profile-plan.json" --steps "$STEPS" \
      --device "$DEVICE" --random-weights --profile "$R/$m-profile.json" \
      --trace-events "$R/$m-trace-events.json" --json "$R/$m-profile-run.json" >/dev/null ||
      echo "gpu-check: profile failed (exit $?)"
  fi
  # Offload (issue 24): the profile model planned with --strategy offload at 50% and 35% of its
  # plain peak and run: the log has each plan's predicted peak, host peak and stall beside the
  # run's measured step time, reserved peak and copy stall (the plan's budget held or not).
  if [[ ,$PARTS, == *,offload,* ]] && [ "$(left)" -gt 60 ]; then
    m=${PROFILE_SPEC%%:*}; bs=${PROFILE_SPEC#*:}
    for pct in 50 35; do
      [ "$(left)" -gt 30 ] || break
      stamp "offload: $m batch $bs at $pct%"
      timeout -k 5 "$(left)" "$M" plan "$MD/$m.onnx" --batch "$bs" --budget "$pct%" --strategy offload \
        --host-budget 32GiB --device "$DEVICE" --json "$R/offload-$pct-plan.json" |
        grep -E "^(plan peak|offloaded|link|recompute|micro-batch) " || true
      [ -f "$R/offload-$pct-plan.json" ] &&
      timeout -k 5 "$(left)" "$M" run "$MD/$m.onnx" --plan "$R/offload-$pct-plan.json" --steps "$STEPS" \
        --device "$DEVICE" --random-weights --json "$R/offload-$pct-run.json" | tail -7 ||
        echo "gpu-check: offload at $pct% failed (exit $?)"
    done
  fi
  if [[ ,$PARTS, == *,accuracy,* ]] && [ "$(left)" -gt 30 ]; then
    stamp "accuracy and budget check: $SPECS"
    timeout -k 5 "$(left)" $G accuracy --memplan "$M" --models "$MD" --device "$DEVICE" --specs "$SPECS" \
      --steps "$STEPS" --jobs "$([[ $DEVICE == cpu ]] && echo 2 || echo 4)" --out "$R" || echo "gpu-check: accuracy stopped (exit $?)"
  fi
  if [[ ,$PARTS, == *,peers,* ]]; then
    for spec in $(echo "$PEER_SPECS" | tr ',' ' '); do
      [ "$(left)" -gt 30 ] || { echo "gpu-check: no time left for the peers of $spec"; continue; }
      stamp "peers: $spec"
      timeout -k 5 "$(left)" $G peers --memplan "$M" --models "$MD" --device "$DEVICE" --model "${spec%%:*}" \
        --batch "${spec#*:}" --peers "$PEERS" --steps "$PEER_STEPS" --samples "$BUNDLE" --out "$R" || echo "gpu-check: peers of $spec stopped (exit $?)"
    done
  fi
  # Data parallelism on NCCL where two GPUs are visible: two ranks per shard mode, each rank's
  # measured allocated peak against the prediction (in the log and results.tgz).
  if [[ ,$PARTS, == *,nccl,* ]] && [[ $DEVICE == cuda* ]] && [ "$(left)" -gt 60 ] &&
     [ "$(echo "$memplan_version" | sed -n 's/.*(\([0-9]*\) device(s) visible).*/\1/p')" -ge 2 ] 2>/dev/null; then
    m=${PROFILE_SPEC%%:*}
    for shard in none gradients parameters; do
      stamp "NCCL, 2 ranks, shard $shard"
      timeout -k 5 "$(left)" "$M" plan "$MD/$m.onnx" --batch 8 --optimizer adam --budget 100GiB --strategy none \
        --devices 2 --shard "$shard" --json "$R/nccl-$shard-plan.json" >/dev/null &&
      timeout -k 5 "$(left)" "$M" run "$MD/$m.onnx" --plan "$R/nccl-$shard-plan.json" --steps 2 --device cuda \
        --nproc 2 --random-weights --json "$R/nccl-$shard-run.json" | tail -4 || echo "gpu-check: NCCL shard $shard failed"
    done
  fi
  stamp report
  $G report --out "$R" >/dev/null || echo "gpu-check: the report failed"
  stamp done

  # At most 8 files: the summary, the log, everything else in one archive.
  gzip -f "$R"/*-trace-events.json 2>/dev/null || true
  [ -f "$R/summary.md" ] && cp "$R/summary.md" "$OUTDIR/"
  tar czf "$OUTDIR/results.tgz" -C "$R" .
  sleep 1; cp "$work/log.txt" "$OUTDIR/log.txt"
  rm -rf "$work"
  local n; n=$(find "$OUTDIR" -mindepth 1 | wc -l)
  echo "gpu-check: $(ls "$OUTDIR" | paste -sd' ') in $OUTDIR ($(du -sh "$OUTDIR/results.tgz" | cut -f1) archive; summary.md has every table)"
  [ "$n" -le $MAX_OUT_FILES ] || die "$n files in $OUTDIR, more than $MAX_OUT_FILES (give --out an empty folder)"
  [ -f "$OUTDIR/summary.md" ] || die "no summary.md"
}

[ $DO_BUNDLE = 1 ] && bundle
[ $DO_RUN = 1 ] && run_check
exit 0
