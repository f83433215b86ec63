#!/usr/bin/env bash
# GPU work as device runs of at most ~9 minutes each (the device allows 10 per command and 30 per
# session; a refused start costs ~90 s of that). Every log goes to OUTDIR with the date, GPU and COMMIT in
# its header (the device copy's git metadata is stale: pass COMMIT).
#
# A new checkout has no .whl/: `bash bench/make_wheels.sh` first (and bench/make_ray_bundle.sh for ray_load).
# Next: s71 (a spare's counter query tried 4, 1 or 0 times: the spares' wait grew from 18 to 30 s when the
#   retries came), then s71b, s73 (builds in processes against threads) and s72 (2 spares against 4): Ray's
#   edge over the local backend; on an H200 (none lent for fourteen sessions) s68, s57 (which then runs s53
#   too), s41's command, s40, the in-trial window (test_native_runner_gpu.py -k hardware_counters), s25,
#   s21b, evaluator, s11c, spares, ray_load, benches, gate. (s47's tests ran and passed in s52.)
# Done on 2026-12-08 (thirty-fourth session), on one H100: s70 (the keyed pool's GPU tests passed; keyed
#   against stored entries; the late settle on/off), s62b and s69b, then s62b's pair in the other order by
#   hand (s62c).
# Thirty-third session (2026-12-07): no device run (about fifteen refused starts, one machine taken back
#   before its call finished; s70 did not run).
# Done on 2026-12-07 (thirty-second session): s63 (deferred checks on/off: no gain; the hostile and guard GPU
#   tests passed; the copy probe), s64 (a PTX copy kernel in the exchange against the copy engine: no gain,
#   the kernel removed after), s62a and the audit's timed_overrun by hand, on one H100.
# Done on 2026-12-07 (thirty-first session): s59 and s60 on one H100 (s60's Ray pass ran, its summary
#   failed: fixed), s61 on another (the prebuilt sandbox library, the Ray pass). s62 got no device.
# Done on 2026-12-07 (thirtieth session): s58 on an H100 (calibrations reused, --exit-now), then by hand
#   s58b (a drawn cross-check with the ordinary exit) and s58c (one drawn each way, side by side).
# Done on 2026-12-07 (twenty-ninth session): s57 on an H100 (the report converted outside the hold, the
#   cross-check's GPU phase split, the experts' GPU cost), then by hand the MHA forward expert, 6 turns.
# Done on 2026-12-07 (twenty-eighth session, later): s53-s55 on an H100 (no H200 lent), s56.
# Done on 2026-12-07 (twenty-eighth session): s51 (the second fill kernel, warm-up calls without a draw,
# the deferral, the forward reference, the flush probe: the fill kernels' GPU test failed on a compile
# error), s52 (the fix and the new defaults beside the old: fused_inputs on, warmup_redraw off).
# Done on 2026-12-06 (twenty-fourth session): s45 (the fused input preparation side by side with the torch
# ops: no cheaper, left off by default; the kernels' GPU test passed).
# Done on 2026-12-06 (twenty-third session): s40 (the attention references a chunk of heads per step:
# 94 -> 79 ms whole, a small saving per turn), s41 (launch records enabled per callback id: none came
# back), s42 (from the API activity kinds: every launch back; experts and runner tests PASSED).
# Done on 2026-12-06 (twenty-second session): s37 (the warm cycle: no cheaper start, left off), s38 (the
# verify pieces; early_refill against after: no gain, left off; the strays: kernels stamped early), s39
# (the span rule for kernels stamped early: two passes, no anomaly; the experts).
# Done on 2026-12-06: s32-s36 (the exchange's order swapped, busy-thread allowance, 128-candidate passes,
# spares 4 vs 8, quiet vs noisy spares, the settled flush); s23 (s22 + wall parts), s24 (runner spin; batch refill against each, replacing s20).
# Done on 2026-12-05: flip, flip2, s17-s19, s11a-c, s12-s16, audit_native, fixes, throughput (Python workers); native, python.
#
# checks:  the ninth session's timing changes (the wall ends after the trusted output copy; a GPU time
#          above its wall is forged): the experts GEMM and MHA forward in the default path; the runner's
#          threads' signal masks (jail probe); then the eighth session's changes (timed calls checked
#          after their trial, the pool's new draws and equal preparation, outputs poisoned before each
#          session): the runner's GPU tests (its pool test), the pool's, the counted position's and the
#          held checks' (the allocator must not grow within a trial) GPU tests, in the runner.
# native_tp: the throughput mix at 16 and 64 envs with candidates in the native runner (issue 12's goals;
#          the Python-worker figures wait for worker start-up).
# round2:  native_tp, then the GPU cost with the hardware counters on in the runner (issue 11: their cost
#          against the floor + 1.0 s goal, beside gpu_cost_2026-12-05_pool_gated.txt).
# audit_native: the issue-11 audit with candidates in the native runner (the default flip waits on it).
# spares:  the Python-worker path with up to 8 spares following the GPU queue (PTXGYM_MAX_SPARES).
# ray_load: Ray vs local at 16 envs side by side, then candidate-path parity under 12 nvcc build loops.
# fixes:   the runner's hardware-counter probe and GPU tests, FlashInfer's GQA tests, prepare cost.
# native:  the five experts and the runner's GPU tests with candidates in the native runner.
# python:  the evaluator suite in the Python worker, the verified pool's GPU tests, FlashInfer's GQA
#          baselines.
# benches: the wall allowance (quiet vs noisy spares, both processes), the GPU cost per verified
#          candidate with the pool (native runner, partial jail accepted; one more turn per subject with
#          Nsight Compute's cross-check drawn, its proofs gated), and with hardware counters alone.
# throughput: distinct cold candidates at 1, 4, 16 and 64 envs (16, 16, 16, 64 of them; issue 12), no
#          secret ncu draw.
# load:    candidate-path parity of the five baselines with 12 nvcc build loops beside the timing (issue
#          12: timing figures unchanged under load), then without (the same run, for the side by side).
# gate:    the GPU cost of a candidate whose Nsight Compute cross-check is drawn, with the proofs gated
#          (their tools' start-up outside the GPU turn: the default) and not (EvalSettings.gated_proofs).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:?stage: evaluator, s73, s73b, s72, s71, s71b, s70, s69, s69b, s68, s67, s66, s66_pair, pool_tests, s63, s62b, s62a, s62, s61, s60, s59, s58, s57, s56, s55, s54, s53, s52, s51, s50, s49, s48b, s48, s47, s46, s45b, s45, s44, s42, s41, s40, s39, s38, s37, s36, s35, s34, s34b, s33, s32, s31, s30, s21, s22, s22s, s23, s24, s25, s25s, s26, s27, s28, s29, s21b, s19, s17, s18, flip, flip2, s16, s15, s14, s13, s12, s11a, s11b, s11c, s10, s10min, s10gemm, checks, native_tp, round2, audit_native, spares, fixes, native, python, benches, throughput, ray_load, load or gate}
out=${2:?outdir}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
bash bench/carried_install.sh || exit 2
header() { echo "# $1: $(date -u +%Y-%m-%dT%H:%MZ), commit ${COMMIT:-unknown}, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"; }
# one pass of the 128-candidate mix, 16 envs streaming, the cross-check off, with the local backend: $1 the
# output file, the rest more throughput.py arguments (--set FIELD=VALUE); environment settings go before it
pass128() {
  local file=$1; shift
  timeout 145 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
    --candidates-per-env 8 --set ncu_crosscheck_fraction=0 "$@" --out "$file"
}
# the experts GEMM and MHA forward in the default path, then the runner's GPU tests (the pool's, the
# counted position's and the held checks' too); $1, $2: their time limits in seconds
experts_and_runner() {
  timeout "$1" bash bench/gpu_tests.sh "$out/checks_experts" --timeout $(($1 - 10)) -q \
    tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
  PTXGYM_CANDIDATE_PROCESS=native timeout "$2" bash bench/gpu_tests.sh "$out/checks" --timeout $(($2 - 10)) -q \
    tests/evaluation/test_native_runner_gpu.py tests/evaluation/test_verified_pool.py \
    tests/evaluation/test_counted_position_gpu.py tests/evaluation/test_fresh_values.py
}
# which threads of a jailed runner could take a signal; $1: the time limit in seconds
jail_probe() {
  { header "runner jail probe"; timeout "$1" python3 bench/runner_jail_probe.py --out "$out/runner_jail_probe.txt"; } \
    > "$out/runner_jail_probe.log" 2>&1
}
case "$stage" in
  evaluator)
    # the evaluator's whole GPU suite in the default path (flip's 260 s limit cut it after 26 of 28)
    timeout 540 bash bench/gpu_tests.sh "$out/evaluator" --timeout 200 -q tests/evaluation/test_gpu_evaluator.py
    ;;
  s21)
    # sixteenth session (no GPU that day): where a call's wall goes (session.wall_parts: the trusted round
    # trip and output copy, the runner's steps) for the honest expert and 20-80 us hiders, with and
    # without the runner spinning for its commands (EvalSettings.runner_spin_us); s21b then runs 16 envs
    # streaming with the backstop scan in helper processes (cpu/scan_helpers.py) against in-process: the
    # timed candidates' wall excess and a 1 ms sleep's lateness in the process, side by side
    timeout 200 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 3 \
      --out "$out/wall_allowance_parts.txt"
    # the runner polling for its next command in each trial (no blocked thread's wake-up in a call)
    timeout 200 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 3 \
      --set runner_spin_us=20000 --out "$out/wall_allowance_spin.txt"
    ;;
  s22|s22s)
    # seventeenth session: verified calls on new draws checked on a secret quarter of the heads / rows
    # (trusted/sampled.py, EvalSettings.verify_sample_share), the GPU cost against whole references, 3 turns
    # per subject (s22s: 2, for a session with little device time left)
    turns=3; limit=150
    if [ "$stage" = s22s ]; then turns=2; limit=110; fi
    timeout 100 bash bench/gpu_tests.sh "$out/sampled_tests" --timeout 90 -q tests/evaluation/test_sampled_checks.py
    for share in sampled whole; do
      set_share=(); [ "$share" = whole ] && set_share=(--set verify_sample_share=1)
      timeout $limit python3 bench/gpu_cost.py --out "$out/gpu_cost_$share.txt" \
        --subjects gemm_expert mha_fwd_expert --turns $turns --no-crosscheck-turn "${set_share[@]}"
    done
    ;;
  s23)
    # s22, then s21's first half (where the walls go, as shipped), in one device call
    bash bench/gpu_session.sh s22 "$out"
    timeout 200 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 3 \
      --out "$out/wall_allowance_parts.txt"
    ;;
  s24)
    # after s23 on the same warm machine: s21's second half (the runner spinning for its commands), then
    # s20's refill comparison (4 spares, each replaced at once against all missing ones together)
    timeout 200 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 3 \
      --set runner_spin_us=20000 --out "$out/wall_allowance_spin.txt"
    PTXGYM_MAX_SPARES=4 timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_each4.txt"
    PTXGYM_MAX_SPARES=4 PTXGYM_SPARE_REFILL=batch timeout 120 python3 bench/throughput.py --evaluator local \
      --sizes 16 --schedule stream --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 \
      --out "$out/throughput_batch4.txt"
    ;;
  s25s)
    # s25's first two runs alone (for a session with little device time left): 1 and 16 envs with the
    # defaults (no cores kept since the eighteenth session), then 16 with two hardware threads kept
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 1,16 --schedule stream \
      --candidates 16 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_stream.txt"
    PTXGYM_TIMING_CORES=2 timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_cores2.txt"
    ;;
  s30)
    # twentieth session: each call's trusted wall read off the interpreter's lock (trusted/exchange.py).
    # The GPU tests whose outputs now come through the exchange's copies (the naive GEMM asserts the
    # path; the expert GEMM in the runner and the worker, parity), then 16 envs streaming with the
    # exchange and without it (EvalSettings.native_wall), each listing every timed candidate's excess
    timeout 200 bash bench/gpu_tests.sh "$out/tests" --timeout 190 -q -s tests/evaluation/test_gpu_evaluator.py \
      tests/evaluation/test_native_runner_gpu.py -k "naive_gemm_passes or expert_gemm_native_and_python"
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 64 \
      --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native_wall.txt"
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 64 \
      --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --set native_wall=false \
      --out "$out/throughput_python_wall.txt"
    ;;
  s40)
    # twenty-third session: the attention references a chunk of heads per step (12x fewer torch calls; the
    # MHA forward's time_verify was 0.29 s a turn, its whole reference 94 ms): where a verified call's check
    # spends the GPU now, the references' precision against float64 and their time on the GPU, the sampled
    # checks' self-test, the experts' GPU cost, then one 16-env pass (the span rule's ran_in counts)
    timeout 120 python3 bench/verify_cost.py --tasks MhaFwd-sm90a Gemm-sm90a --out "$out/verify_cost.txt"
    timeout 150 bash bench/gpu_tests.sh "$out/reference_tests" --timeout 140 -q -s \
      tests/evaluation/test_reference_precision.py tests/evaluation/test_sampled_checks.py
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_chunked.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 4 --no-crosscheck-turn
    ;;
  s45)
    # twenty-fourth session: a timed call's fresh values and input check by one Triton kernel per input
    # (fused_inputs.py): the kernels on the GPU, the preparation's cost on both paths (a pool entry's
    # beside a new draw's), the GPU tests of the fresh values and the pool (allocator, held checks), the
    # experts' GPU cost on both paths side by side
    timeout 100 bash bench/gpu_tests.sh "$out/fused_tests" --timeout 90 -q \
      tests/evaluation/test_fused_inputs.py tests/evaluation/test_fresh_values.py
    timeout 100 python3 bench/prepare_cost.py --tasks Gemm-sm90a MhaFwd-sm90a --out "$out/prepare_cost.txt"
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_torch_ops.txt" --set fused_inputs=false \
      --subjects gemm_expert mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    ;;
  s45b)
    # s45 cut to fit a short device budget: the kernels on the GPU, then the MHA forward expert's GPU cost
    # on both paths side by side (3 turns each)
    timeout 100 bash bench/gpu_tests.sh "$out/fused_tests" --timeout 90 -q tests/evaluation/test_fused_inputs.py
    timeout 90 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    timeout 90 python3 bench/gpu_cost.py --out "$out/gpu_cost_torch_ops.txt" --set fused_inputs=false \
      --subjects mha_fwd_expert gemm_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    ;;
  s71|s71b)
    # thirty-fourth session: a spare's counter query tried 4 times (the default), once, or not at all
    # (spare_hw_prepare_attempts; 0: counted subjects query in their sandbox step), 16 envs streaming,
    # 128 candidates, the cross-check off, side by side on one machine (s71: 4, 1, 0; s71b: 0, 1, 4);
    # first the runner's GPU test of the attach's query steps (two runners attached at once)
    timeout 90 bash bench/gpu_tests.sh "$out/attach_tries" --timeout 80 -q -s \
      tests/evaluation/test_native_runner_gpu.py -k counter_query_tries
    order="4 1 0"; [ "$stage" = s71b ] && order="0 1 4"
    for tries in $order; do
      pass128 "$out/throughput_128_tries_$tries.txt" --set spare_hw_prepare_attempts="$tries"
    done
    ;;
  s72)
    # thirty-fourth session: why the Ray backend was 9-10% faster than the local one on one machine
    # (s62b, s62c): its actor takes one call at a time, so it keeps 2 spares, and its evaluator has a
    # process of its own; the local backend with 2 spares at most against its default (4), side by side
    for spares in 2 4; do
      PTXGYM_MAX_SPARES=$spares pass128 "$out/throughput_128_spares_$spares.txt"
    done
    ;;
  s73|s73b)
    # thirty-fourth session: the turns' CPU halves in 16 build processes (PTXGYM_BUILD_PROCESSES) against
    # threads of the evaluator's process (the default), 16 envs streaming, 128 candidates, the cross-check
    # off, side by side (s73: processes first; s73b: threads first): does the local backend then match Ray?
    order="16 0"; [ "$stage" = s73b ] && order="0 16"
    for procs in $order; do
      PTXGYM_BUILD_PROCESSES=$procs pass128 "$out/throughput_128_build_processes_$procs.txt"
    done
    ;;
  s70)
    # thirty-third session, one call for little device time: the keyed pool's GPU tests (its evaluator
    # change has not run on a GPU yet: 18 s in s52), then s69's pair (late_spare_settle on, then off), then
    # s66's cost pair (stored entries, keyed ones) if the call's 600 s allow (~420 s expected)
    bash "$0" pool_tests "$out"
    bash "$0" s69 "$out"
    bash "$0" s66_pair "$out"
    ;;
  s69|s69b)
    # thirty-third session: the spares awaited before the first timed call where the calibration is kept
    # (late_spare_settle) against before the calibration (the default), 16 envs streaming, 128 candidates,
    # the cross-check off, side by side on one machine (s69: on then off; s69b: off then on)
    order="true false"; [ "$stage" = s69b ] && order="false true"
    for late in $order; do
      pass128 "$out/throughput_128_late_$late.txt" --set late_spare_settle="$late"
    done
    ;;
  s68)
    # thirty-third session: on an H200 (none lent for twelve sessions) the keyed pool's GPU tests first
    # (its evaluator change has not run on a GPU yet), then s53 without its experts' tests (the GPU cost
    # of the experts and the SIMT control, the cross-check turn, one 16-env pass of 128): a second call
    # runs s66's A/B and the experts; on an H100, s66 (s67 with s62b may pass the 600 s a call may take)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      bash "$0" pool_tests "$out"
      timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_keyed_defaults.txt" \
        --subjects mha_fwd_expert gemm_expert gemm_simt --turns 4 --prepare-tasks
      timeout 140 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128.txt"
    else
      bash "$0" s66 "$out"
    fi
    ;;
  s67)
    # s66 then s62b in one device call (~8 minutes: one start for both); carry .whl, build/abold, .raybundle
    bash "$0" s66 "$out/s66"
    bash "$0" s62b "$out/s62b"
    ;;
  s66)
    # thirty-second session: verified pool entries as Philox keys (fill draws them again; 26c2f6f) against
    # entries holding torch's draw (the package of 0df7e04, carried in build/abold: PYTHONPATH), the
    # experts' GPU cost side by side on one machine; first the GPU tests of the pool, the fused kernels
    # and the fresh values at this tree. Before: `mkdir -p build/abold && git archive 0df7e04 ptxgym |
    # tar -x -C build/abold`, and carry build/abold with .whl
    bash "$0" pool_tests "$out"
    bash "$0" s66_pair "$out"
    ;;
  pool_tests)
    # the GPU tests of the verified pool, the fused input kernels and the fresh values (s66, s68, s70)
    timeout 150 bash bench/gpu_tests.sh "$out/pool" --timeout 140 -q tests/evaluation/test_verified_pool.py \
      tests/evaluation/test_fused_inputs.py tests/evaluation/test_fresh_values.py
    ;;
  s66_pair)
    # s66's cost pair: the package of 0df7e04 (stored entries, build/abold) then this tree (keyed entries)
    for p in "" "$PWD/build/abold"; do (cd / && PYTHONPATH=$p python3 -c "import ptxgym; print('ptxgym from', ptxgym.__file__)"); done
    PYTHONPATH="$PWD/build/abold" COMMIT=0df7e04 timeout 100 python3 bench/gpu_cost.py \
      --out "$out/gpu_cost_stored_entries.txt" --subjects mha_fwd_expert gemm_expert --turns 4 --prepare-tasks \
      --no-crosscheck-turn
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost_keyed_entries.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 4 --prepare-tasks --no-crosscheck-turn
    ;;
  s62b)
    # s62's Ray backend and local one side by side on one machine (16 envs streaming, 128 candidates)
    # shellcheck disable=SC1091
    source bench/carried_ray.sh
    for ev in ray local; do
      timeout 140 python3 bench/throughput.py --evaluator "$ev" --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_$ev.txt"
    done
    ;;
  s63)
    # thirty-first session, for the next: the per-call guard and input checks read once per trial
    # (deferred_call_checks, off until measured) against after every call (the default), side by side on
    # one machine (MHA forward and GEMM experts, 4 turns, no cross-check turn); then the guard and hostile
    # GPU tests and the fused kernels' (its deferred check included) with it on. First (thirty-second
    # session) the output copy's probe: the copy engine against a PTX copy kernel (bench/copy_probe.py)
    timeout 60 python3 bench/copy_probe.py --out "$out/copy_probe.txt"
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_deferred.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 4 --prepare-tasks --no-crosscheck-turn \
      --set deferred_call_checks=true
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost_per_call.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 4 --prepare-tasks --no-crosscheck-turn
    timeout 200 bash bench/gpu_tests.sh "$out/hostile" --timeout 190 -q tests/evaluation/test_gpu_evaluator.py \
      -k "hostile or guard or deferred or kernels_on_the_gpu" tests/evaluation/test_fused_inputs.py
    ;;
  s62a)
    # s62's audit cases alone (a session with little device time left)
    { header "audit, input-mutation cases"; timeout 140 python3 -c "import sys; from ptxgym.cli.main import main; sys.exit(main(sys.argv[1:]))" \
      audit --evaluator local --case timed_scratch --case input_mutating --case pointer_cache --case naive; } \
      > "$out/audit_inputs.txt" 2>&1
    ;;
  s62)
    # thirty-first session, last: the input-mutation cases of the audit with the checks after timed calls
    # sampled (the new timed_scratch: 64 KiB of an input as scratch on timed calls only), then the Ray
    # backend and the local one side by side on one machine (16 envs streaming, 128 candidates)
    { header "audit, input-mutation cases"; timeout 150 python3 -c "import sys; from ptxgym.cli.main import main; sys.exit(main(sys.argv[1:]))" \
      audit --evaluator local --case timed_scratch \
      --case input_mutating --case pointer_cache --case call_counting --case noop --case naive; } \
      > "$out/audit_inputs.txt" 2>&1
    bash "$0" s62b "$out"
    ;;
  s61)
    # thirty-first session, later: the drawn cross-check with the driver's sandbox library built by the
    # trusted side first (s59's phases: the driver built it after the go in gpu_cost's fresh cache, 1.0-1.6
    # s of the GPU phase), the experts' GPU cost over 4 turns; then s60's Ray pass again (its summary
    # failed on the remote backend's missing verdicts)
    timeout 150 python3 bench/gpu_cost.py --out "$out/gpu_cost_prebuilt.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 4 --prepare-tasks --ncu-phases
    # shellcheck disable=SC1091
    source bench/carried_ray.sh
    timeout 170 python3 bench/throughput.py --evaluator ray --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_ray.txt"
    ;;
  s60)
    # thirty-first session: issue 12's Ray backend beside the local one at the current defaults (16 envs
    # streaming 128 candidates each, the cross-check off in both; last measured on 2026-12-04 at 8 envs)
    # shellcheck disable=SC1091
    source bench/carried_ray.sh
    for ev in ray local; do
      timeout 170 python3 bench/throughput.py --evaluator "$ev" --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_$ev.txt"
    done
    ;;
  s59)
    # thirty-first session: the input check after each timed call on a secret eighth of each input's
    # blocks (input_check_share, the new default) beside every block (1, as before), the fused kernels'
    # GPU checks (sampled included); where the drawn cross-check's GPU phase goes inside the evaluator
    # (the driver's phases stamped against the gate's go and the tool's end: ~1 s of proof_gpu was not
    # placed by the ungated probe); then issue 12's 16-env pass with calibrations reused (comparable with
    # s53/s55: the cross-check off) and one with the defaults
    timeout 90 bash bench/gpu_tests.sh "$out/fused" --timeout 80 -q tests/evaluation/test_fused_inputs.py
    timeout 140 python3 bench/gpu_cost.py --out "$out/gpu_cost_sampled_checks.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 3 --prepare-tasks --ncu-phases
    timeout 60 python3 bench/gpu_cost.py --out "$out/gpu_cost_whole_checks.txt" \
      --subjects mha_fwd_expert --turns 3 --prepare-tasks --no-crosscheck-turn --set input_check_share=1
    timeout 130 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_reuse.txt"
    timeout 130 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --out "$out/throughput_128_defaults.txt"
    ;;
  s58)
    # thirtieth session: the experts' GPU cost with calibrations reused (the new default: the first turn
    # measures, the later ones reuse) and Nsight Compute's driver ending without the interpreter's
    # teardown in the drawn cross-check (--exit-now); then the probe: is the report whole and the same
    # that way, and how long after the profiled call does the tool end
    timeout 200 python3 bench/gpu_cost.py --out "$out/gpu_cost_reuse_exit_now.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 5 --prepare-tasks --set ncu_exit_now=true
    timeout 120 python3 bench/ncu_readback_probe.py --out "$out/ncu_exit_now.txt" --file-only --exit-now-too \
      --repeats 1
    ;;
  s57)
    # twenty-ninth session: where Nsight Compute's cross-check spends its GPU phase (the driver's phases),
    # and whether its report reads back from a sealed memfd (no file a candidate could reach, so outside
    # the hold), then the GPU cost with that read-back; on an H200 also s53 (none lent for eight sessions)
    timeout 240 python3 bench/ncu_readback_probe.py --out "$out/ncu_readback.txt"
    # the evaluator's cross-check with the conversion outside the hold (from a sealed copy), as s56
    timeout 150 python3 bench/gpu_cost.py --out "$out/gpu_cost_convert_outside.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 3 --prepare-tasks
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_new_defaults.txt" \
        --subjects mha_fwd_expert gemm_expert gemm_simt --turns 4 --prepare-tasks
      timeout 140 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128.txt"
    fi
    ;;
  s56)
    # twenty-eighth session: Nsight Compute's cross-check split: how much of its GPU phase (proof_gpu) is
    # the report's read-back under the hold (proof_read), for the MHA forward and GEMM experts
    timeout 150 python3 bench/gpu_cost.py --out "$out/gpu_cost_crosscheck.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 1 --prepare-tasks
    ;;
  s55)
    # twenty-eighth session: one more 16-env pass of 128 candidates under the new defaults (beside s53's)
    timeout 140 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128.txt"
    ;;
  s54)
    # twenty-eighth session: the adversarial audit in the runner under the new defaults (fused_inputs on,
    # warmup_redraw off): no hostile case may be paid
    timeout 200 bash bench/gpu_tests.sh "$out/audit_native" --timeout 190 -q -s tests/cli/test_audit.py
    ;;
  s53)
    # twenty-eighth session, on an H200 (none lent for seven sessions): the new defaults' GPU cost (the
    # experts and the SIMT control, the cross-check turn), one 16-env pass of 128 candidates (issue 12's
    # 40 verified correct/min), the GEMM and MHA forward experts with the target executed
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_new_defaults.txt" \
      --subjects mha_fwd_expert gemm_expert gemm_simt --turns 4 --prepare-tasks
    timeout 140 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128.txt"
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
    ;;
  s52)
    # twenty-eighth session: the new defaults (fused_inputs on, warmup_redraw off, the gather variant's
    # compile fix) side by side with the old ones in one device call: the experts' and the SIMT control's
    # GPU cost (one more turn each with Nsight Compute's cross-check drawn), then the old defaults; the
    # fill kernels', fresh values' and pool's GPU tests; the GEMM and MHA forward experts with the target
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost_new_defaults.txt" \
      --subjects mha_fwd_expert gemm_expert gemm_simt --turns 4 --prepare-tasks
    timeout 90 python3 bench/gpu_cost.py --out "$out/gpu_cost_old_defaults.txt" --set fused_inputs=false \
      --set warmup_redraw=true --subjects mha_fwd_expert gemm_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 130 bash bench/gpu_tests.sh "$out/tests" --timeout 120 -q tests/evaluation/test_fused_inputs.py \
      tests/evaluation/test_fresh_values.py tests/evaluation/test_verified_pool.py
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
    ;;
  s50|s51)
    # s48 and s49 cut to a ten-minute device budget (~330 s): the fill kernels' GPU test, the MHA forward
    # expert's GPU cost on the fused path, on the torch ops, and fused with the last checks not deferred;
    # the forward reference beside the previous formula; the L2 flush by part. s51 (~400 s): also fused
    # with the warm-up calls without a draw (warmup_redraw off)
    timeout 80 bash bench/gpu_tests.sh "$out/tests" --timeout 70 -q tests/evaluation/test_fused_inputs.py
    timeout 65 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused.txt" --set fused_inputs=true \
      --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    timeout 65 python3 bench/gpu_cost.py --out "$out/gpu_cost_torch_ops.txt" --set fused_inputs=false \
      --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    if [ "$stage" = s51 ]; then
      timeout 65 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused_warm_rest.txt" --set fused_inputs=true \
        --set warmup_redraw=false --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    fi
    timeout 45 python3 bench/verify_cost.py --tasks MhaFwd-sm90a --out "$out/verify_cost.txt"
    timeout 65 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused_not_deferred.txt" --set fused_inputs=true \
      --set defer_final_checks=false --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    timeout 20 python3 bench/flush_probe.py --out "$out/flush_probe.txt"
    ;;
  s48)
    # twenty-fifth session: fused_inputs' second fill kernel (eight normals per Philox call on the fast
    # special functions, one sign per program, vector loads and stores) and differ_all (one host read per
    # check); the last checks after the worker's stop (defer_final_checks); the attention forward's
    # reference in fewer passes (softmax; the LSE from the softmax at the max): the kernels and the
    # references on the GPU, the fresh values' and the pool's GPU tests (the allocator test's fix), the
    # preparation on both paths, the L2 flush by part, the reference's cost beside the previous formula,
    # the experts' GPU cost on both input paths
    timeout 150 bash bench/gpu_tests.sh "$out/tests" --timeout 140 -q tests/evaluation/test_fused_inputs.py \
      tests/evaluation/test_fresh_values.py tests/evaluation/test_verified_pool.py \
      tests/evaluation/test_reference_precision.py
    timeout 70 python3 bench/prepare_cost.py --tasks Gemm-sm90a MhaFwd-sm90a --out "$out/prepare_cost.txt"
    timeout 30 python3 bench/flush_probe.py --out "$out/flush_probe.txt"
    timeout 60 python3 bench/verify_cost.py --tasks MhaFwd-sm90a --out "$out/verify_cost.txt"
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused.txt" --set fused_inputs=true \
      --subjects mha_fwd_expert gemm_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost_torch_ops.txt" --set fused_inputs=false \
      --subjects mha_fwd_expert gemm_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    ;;
  s48b)
    # s48 cut for a short device budget: the kernels' and references' GPU tests, the preparation, the
    # flush, the reference side by side, the MHA forward expert's GPU cost on both input paths
    timeout 110 bash bench/gpu_tests.sh "$out/tests" --timeout 100 -q tests/evaluation/test_fused_inputs.py \
      tests/evaluation/test_reference_precision.py
    timeout 60 python3 bench/prepare_cost.py --tasks MhaFwd-sm90a Gemm-sm90a --out "$out/prepare_cost.txt"
    timeout 25 python3 bench/flush_probe.py --out "$out/flush_probe.txt"
    timeout 50 python3 bench/verify_cost.py --tasks MhaFwd-sm90a --out "$out/verify_cost.txt"
    timeout 70 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused.txt" --set fused_inputs=true \
      --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    timeout 70 python3 bench/gpu_cost.py --out "$out/gpu_cost_torch_ops.txt" --set fused_inputs=false \
      --subjects mha_fwd_expert --turns 3 --no-crosscheck-turn --prepare-tasks
    ;;
  s49)
    # after s48: the deferral side by side (fused inputs, defer_final_checks off), then s41's runner tests
    # and experts
    timeout 70 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused_not_deferred.txt" --set fused_inputs=true \
      --set defer_final_checks=false --subjects mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 70 python3 bench/gpu_cost.py --out "$out/gpu_cost_fused_deferred.txt" --set fused_inputs=true \
      --subjects mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 200 bash bench/gpu_tests.sh "$out/runner_tests" --timeout 190 -q -s \
      tests/evaluation/test_runner_cupti_gpu.py tests/evaluation/test_native_runner_gpu.py \
      -k "cupti_path or expert_gemm_native or expert_gemm_hardware"
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
    ;;
  s47)
    # twenty-fourth session, after s45 (the fused path no cheaper, now off by default): the kernels on the
    # GPU (opt-in path), the fresh values' GPU test with its hold fixed, the pool's GPU tests (default path)
    timeout 200 bash bench/gpu_tests.sh "$out/tests" --timeout 190 -q tests/evaluation/test_fused_inputs.py \
      tests/evaluation/test_fresh_values.py tests/evaluation/test_verified_pool.py
    ;;
  s46)
    # twenty-fourth session: the verified pool's GPU tests on the fused path (allocator, held checks),
    # then s41 (runner tests, experts, one 16-env pass)
    timeout 120 bash bench/gpu_tests.sh "$out/pool_tests" --timeout 110 -q tests/evaluation/test_verified_pool.py
    bash bench/gpu_session.sh s41 "$out"
    ;;
  s44)
    # twenty-fourth session, first lent machine: s41 (runner tests, experts, one 16-env pass), then the
    # experts' GPU cost (s40's gpu_cost part)
    bash bench/gpu_session.sh s41 "$out"
    timeout 110 python3 bench/gpu_cost.py --out "$out/gpu_cost.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 4 --no-crosscheck-turn
    ;;
  s42)
    # twenty-third session: s41 again with the launch records taken from the driver and runtime API
    # activity kinds, filtered to the launch calls as they are read (per-callback enabling gave none)
    bash bench/gpu_session.sh s41 "$out"
    ;;
  s41)
    # twenty-third session: kernel records joined to their launch API records by correlation id (a kernel
    # belongs to the window its launch lies in): the runner's CUPTI GPU test (every launch back), the
    # expert GEMM in the runner (launch_known) and with the counted call in the trial (no FOREIGN_KERNEL
    # from the profiler's own kernel), the experts with the target executed, then one 16-env pass
    timeout 200 bash bench/gpu_tests.sh "$out/runner_tests" --timeout 190 -q -s \
      tests/evaluation/test_runner_cupti_gpu.py tests/evaluation/test_native_runner_gpu.py \
      -k "cupti_path or expert_gemm_native or expert_gemm_hardware"
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
    timeout 130 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_launches.txt"
    ;;
  s39)
    # twenty-second session: a kernel record belongs to a window also when it starts before the window and
    # runs 50 us or more into it (cupti_spans.Records, the runner's Records: s38's lost spans were kernels
    # stamped 0.6-8.9 us before their windows); 16 envs streaming, 128 candidates (TIMING_ANOMALYs, the
    # wgmma variants' census with the counted call in the trial), then the expert GEMM and MHA forward
    timeout 130 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_belonging.txt"
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and (Gemm or MhaFwd)"
    ;;
  s38)
    # twenty-second session: the spares replaced right after the subject's last memory check, while its
    # runner is torn down (EvalSettings.early_refill), against after it; 16 envs streaming, 128
    # candidates, in the order on, off, off, on (the settle wait and the discard in each pass); first, where
    # a verified call's check spends the GPU (the MHA forward's time_verify, 0.29 s a turn)
    timeout 120 python3 bench/verify_cost.py --tasks MhaFwd-sm90a Gemm-sm90a --out "$out/verify_cost.txt"
    for pass in 1_true 2_false 3_false 4_true; do
      timeout 150 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --set early_refill=${pass#*_} \
        --out "$out/throughput_128_early_refill_$pass.txt"
    done
    ;;
  s37)
    # twenty-second session's first call: the warm cycle of the range profiler on a spare's warm-up
    # (EvalSettings.hw_warm_start) against the default, the experts' GPU cost side by side (runner_hw_start,
    # spare_attach_hw_prepare, worker_settle, medians); then 16 envs streaming, 128 candidates, twice, for
    # the lost spans' strays (Spans.outside, empty_nearest_us in the anomalies' messages)
    for warm in false true; do
      timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost_warm_$warm.txt" --subjects gemm_expert \
        mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks --set hw_warm_start=$warm
    done
    for pass in 1 2; do
      timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
        --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_strays_$pass.txt"
    done
    ;;
  s36)
    # 16 envs streaming, 128 candidates: where a lost span's records fell (Spans.outside, empty_nearest_us)
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_strays.txt"
    ;;
  s35)
    # 16 envs streaming, 128 candidates: the trial ends counted (how often CUPTI's records needed a wait),
    # then the same with noisy spares (replaced at once, never awaited: the settle wait's cost and guard)
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_quiet.txt"
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --noisy-spares --out "$out/throughput_128_noisy.txt"
    ;;
  s34)
    # twenty-first session: a trial's end waits for CUPTI's records (settle_flush): the experts' GPU cost
    # (its trial_end wall), then 16 envs streaming, 128 candidates (the lost-span anomaly of s33)
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost.txt" --subjects gemm_expert mha_fwd_expert \
      --turns 4 --no-crosscheck-turn --prepare-tasks
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128.txt"
    ;;
  s34b)
    # the experts with the target executed, the runner's GPU tests (its spans, census and counters)
    timeout 280 bash bench/gpu_tests.sh "$out/experts" --timeout 270 -q \
      tests/knowledge_packs/test_expert_solutions.py tests/evaluation/test_native_runner_gpu.py \
      -k "test_expert_solution_passes_the_evaluator_with_target_executed or runner"
    ;;
  s33)
    # twenty-first session: 16 envs streaming, 128 candidates (8 per env: less of the pass is the first
    # builds' ramp), the default 4 spares then 8 (PTXGYM_MAX_SPARES); each honest anomaly's message
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 128 \
      --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_spares4.txt"
    PTXGYM_MAX_SPARES=8 timeout 200 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 128 --candidates-per-env 8 --set ncu_crosscheck_fraction=0 --out "$out/throughput_128_spares8.txt"
    ;;
  s32)
    # twentieth session's follow-up: 16 envs streaming with the Python path first, then the exchange (the
    # order of s30 swapped: its first pass, on a fresh machine, had 10 s more GPU in all), then the wall
    # allowance beside one busy Python thread (0.5 ms bursts), hiders of 20-80 us, both paths
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 64 \
      --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --set native_wall=false \
      --out "$out/throughput_python_wall.txt"
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 64 \
      --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native_wall.txt"
    for wall in true false; do
      timeout 150 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 2 \
        --busy-threads 1 --busy-burst-ms 0.5 --set native_wall=$wall --out "$out/wall_allowance_busy1_$wall.txt"
    done
    ;;
  s31)
    # s30's follow-up: the expert GEMM in the runner and the worker (count names fixed), then the wall
    # allowance with 4 busy Python threads in the evaluator's process, the exchange against the Python path
    timeout 100 bash bench/gpu_tests.sh "$out/tests" --timeout 90 -q -s tests/evaluation/test_native_runner_gpu.py \
      -k "expert_gemm_native_and_python"
    for wall in true false; do
      timeout 200 python3 bench/wall_allowance.py --process native --hidden-us 20 40 80 --repeats 2 \
        --busy-threads 4 --set native_wall=$wall --out "$out/wall_allowance_busy_native_wall_$wall.txt"
    done
    ;;
  s29)
    # s28 again with the tests' count names fixed (the counters alone name GMMA / TMA loads) and the GPU
    # cost printing a lost-span anomaly's details; then 1 and 16 envs streaming with the new defaults
    timeout 150 bash bench/gpu_tests.sh "$out/experts" --timeout 140 -q -s \
      tests/knowledge_packs/test_expert_solutions.py tests/evaluation/test_native_runner_gpu.py \
      -k "test_expert_solution_passes_the_evaluator_with_target_executed or hardware_counters"
    timeout 90 python3 bench/gpu_cost.py --out "$out/gpu_cost.txt" --subjects gemm_expert mha_fwd_expert \
      --turns 6 --no-crosscheck-turn --prepare-tasks
    timeout 200 python3 bench/throughput.py --evaluator local --sizes 1,16 --schedule stream \
      --candidates 16 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_stream.txt"
    ;;
  s28)
    # nineteenth session, new defaults: the hardware-counted call inside the activity trial, and the
    # SASS-patched call only for a module of several MMA tile shapes. The five experts (the target credit
    # from the counters alone where they have one shape), the runner's counter tests, the audit in the
    # runner, then the experts' GPU cost
    timeout 240 bash bench/gpu_tests.sh "$out/experts" --timeout 230 -q -s \
      tests/knowledge_packs/test_expert_solutions.py tests/evaluation/test_native_runner_gpu.py \
      -k "test_expert_solution_passes_the_evaluator_with_target_executed or hardware_counters"
    timeout 200 bash bench/gpu_tests.sh "$out/audit_native" --timeout 190 -q -s tests/cli/test_audit.py
    timeout 100 python3 bench/gpu_cost.py --out "$out/gpu_cost.txt" --subjects gemm_expert mha_fwd_expert \
      --turns 4 --no-crosscheck-turn --prepare-tasks
    ;;
  s27)
    # nineteenth session: the hardware-counted call inside the activity trial, its window around the call
    # alone (the range profiler's WaitNs kernel outside it); then the GPU cost of the experts with the
    # counters alone deciding in the trial against the defaults, side by side
    timeout 200 bash bench/gpu_tests.sh "$out/hw" --timeout 190 -q tests/evaluation/test_native_runner_gpu.py \
      -k "hardware_counters"
    timeout 150 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_in_trial.txt" --subjects gemm_expert \
      mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks --set sass_count_with_hw=false \
      --set hw_count_in_trial=true
    timeout 150 python3 bench/gpu_cost.py --out "$out/gpu_cost_default.txt" --subjects gemm_expert \
      mha_fwd_expert --turns 4 --no-crosscheck-turn --prepare-tasks
    ;;
  s26)
    # nineteenth session: where the loaded honest excess comes from. 1 and 16 envs streaming with the
    # defaults, then 16 with builds under SCHED_IDLE (PTXGYM_BUILD_PRIORITY=idle), 16 with a 200 us
    # interpreter switch interval, and 16 with both; each pass lists every timed candidate's excess
    timeout 190 python3 bench/throughput.py --evaluator local --sizes 1,16 --schedule stream \
      --candidates 16 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_stream.txt"
    PTXGYM_BUILD_PRIORITY=idle timeout 100 python3 bench/throughput.py --evaluator local --sizes 16 \
      --schedule stream --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 \
      --out "$out/throughput_idle.txt"
    timeout 100 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream --candidates 64 \
      --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --switch-interval-us 200 \
      --out "$out/throughput_switch.txt"
    PTXGYM_BUILD_PRIORITY=idle timeout 100 python3 bench/throughput.py --evaluator local --sizes 16 \
      --schedule stream --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 \
      --switch-interval-us 200 --out "$out/throughput_both.txt"
    ;;
  s25)
    # eighteenth session: the defaults since s24 (batch refill, 4 spares): 1 and 16 envs streaming side by
    # side, 16 with two hardware threads kept for timing (confine/cores.py) and 16 with up to 8 spares;
    # then the MHA forward expert's GPU cost over 6 turns (spans lost after a counted call timed again)
    bash bench/gpu_session.sh s25s "$out"
    PTXGYM_MAX_SPARES=8 timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_spares8.txt"
    timeout 120 python3 bench/gpu_cost.py --out "$out/gpu_cost_mha.txt" --subjects mha_fwd_expert --turns 6 \
      --no-crosscheck-turn --prepare-tasks
    ;;
  s21b)
    # s21's second half: 16 envs streaming, the backstop scan in helper processes against in-process
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_helpers.txt"
    PTXGYM_SCAN_HELPERS=0 timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 \
      --schedule stream --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 \
      --out "$out/throughput_inprocess.txt"
    ;;
  s19)
    # s17/s18's follow-ups: memcheck's driver with its rlimits deferred to just before the candidate loads,
    # the GEMM and MHA forward experts after the TMA-only change (in-band counts judged by the task's
    # families), then 16 envs streaming 4 candidates each with the wall cross-check's retime
    timeout 100 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants shipped --cases oob_read naive --timeout 30 --dump-after 20
    timeout 150 bash bench/gpu_tests.sh "$out/tests" --timeout 140 -q tests/evaluation/test_gpu_evaluator.py \
      tests/knowledge_packs/test_expert_solutions.py -k "memcheck_clean or executed and (Gemm or MhaFwd)"
    timeout 120 python3 bench/throughput.py --evaluator local --sizes 16 --schedule stream \
      --candidates 64 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_stream16.txt"
    ;;
  s17)
    # thirteenth session: memcheck's driver jailed before CUDA (driver.EARLY_JAIL_MODES), against the
    # broadcast after it ("late"), on the faulting and the clean GEMM; then the evaluator's GPU tests that
    # flip (2364f40) did not reach or failed (the slow cut-off's test expected the probe's latencies)
    timeout 200 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants shipped late --cases oob_read naive --timeout 30 --dump-after 20
    timeout 330 bash bench/gpu_tests.sh "$out/evaluator_rest" --timeout 150 -q tests/evaluation/test_gpu_evaluator.py \
      -k "far_slower or verdict_cache or still_healthy or guard_pages or memcheck_clean or write_past"
    ;;
  s18)
    # throughput in the default path (native runner, hw_counters on, spares settled before calibration,
    # counter query at a spare's attach): 1 and 16 envs streaming 4 candidates per env, then one 16-wave
    # as before; then the GPU cost with the hardware counters (worker_sandbox, worker_settle)
    timeout 300 python3 bench/throughput.py --evaluator local --sizes 1,16 --schedule stream \
      --candidates 16 --candidates-per-env 4 --set ncu_crosscheck_fraction=0 --out "$out/throughput_stream.txt"
    timeout 90 python3 bench/throughput.py --evaluator local --sizes 16 --candidates 16 --candidates-per-env 1 \
      --set ncu_crosscheck_fraction=0 --out "$out/throughput_waves16.txt"
    timeout 90 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_true.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 2 --no-crosscheck-turn
    ;;
  native)
    # test_gpu_evaluator.py and test_proof_gate.py passed in the runner on 2026-12-05
    # (gpu_tests_2026-12-05_native_gated.txt); what the default flip still waits on:
    PTXGYM_CANDIDATE_PROCESS=native timeout 540 bash bench/gpu_tests.sh "$out/native" --timeout 200 -q \
      tests/knowledge_packs/test_expert_solutions.py tests/evaluation/test_native_runner_gpu.py \
      tests/evaluation/test_runner_cupti_gpu.py
    ;;
  fixes)
    # 2026-12-05 (seventh session): what the sixth left failing. The range profiler in the jailed runner
    # (which jail layer stops cuptiProfilerGetCounterAvailability; the availability queried before the
    # jail), the runner's GPU tests again (the pool test's arena, the hardware-counter tests with
    # hw_counters on), FlashInfer's GQA tests (the short-query paged prefill plans FA2: skipped where
    # not compilable; a small long-query batch on FA3).
    PTXGYM_CANDIDATE_PROCESS=native timeout 150 python3 bench/runner_hw_probe.py --out "$out/runner_hw_probe.txt"
    PTXGYM_CANDIDATE_PROCESS=native timeout 200 bash bench/gpu_tests.sh "$out/native" --timeout 100 -q \
      tests/evaluation/test_native_runner_gpu.py tests/evaluation/test_runner_cupti_gpu.py
    # shellcheck disable=SC1091
    source bench/carried_flashinfer.sh
    timeout 120 bash bench/gpu_tests.sh "$out/flashinfer" --timeout 100 -q -s \
      tests/evaluation/test_flashinfer_baselines_gpu.py
    timeout 90 python3 bench/prepare_cost.py --out "$out/prepare_cost.txt"
    # where MHA forward's per-call time goes (time_inputs_wait, time_calls), with the hardware counters
    # alone (no SASS-patched call)
    PTXGYM_CANDIDATE_PROCESS=native timeout 130 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_only.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 2 --set verified_pool_partial_jail=true \
      --set hw_counters=true --set sass_count_with_hw=false --no-crosscheck-turn
    ;;
  python)
    # the jail probe ran on 2026-12-05 (runner_jail_probe_2026-12-05.txt: the split jail fails cuInit too);
    # the suite needs more than 300 s in the Python worker (cut there on 2026-12-05 after 29 tests)
    # shellcheck disable=SC1091
    source bench/carried_flashinfer.sh
    PTXGYM_CANDIDATE_PROCESS=python timeout 420 bash bench/gpu_tests.sh "$out/python" --timeout 200 -q \
      tests/evaluation/test_gpu_evaluator.py \
      tests/evaluation/test_counted_position_gpu.py tests/evaluation/test_verified_pool.py
    { header "flashinfer"; timeout 60 python3 bench/flashinfer_aot.py check; } > "$out/flashinfer_check.log" 2>&1
    timeout 100 bash bench/gpu_tests.sh "$out/flashinfer" --timeout 100 -q -s \
      tests/evaluation/test_flashinfer_baselines_gpu.py
    ;;
  benches)
    timeout 200 python3 bench/wall_allowance.py --out "$out/wall_allowance_quiet.txt" --process native python \
      --hidden-us 20 40 80 --repeats 2
    timeout 120 python3 bench/wall_allowance.py --out "$out/wall_allowance_noisy.txt" --process python \
      --hidden-us 40 --repeats 2 --noisy-spares
    PTXGYM_CANDIDATE_PROCESS=native timeout 240 python3 bench/gpu_cost.py --out "$out/gpu_cost_pool.txt" \
      --set verified_pool_partial_jail=true
    PTXGYM_CANDIDATE_PROCESS=native timeout 120 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_only.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 2 --set verified_pool_partial_jail=true \
      --set hw_counters=true --set sass_count_with_hw=false --no-crosscheck-turn
    ;;
  throughput)
    timeout 560 python3 bench/throughput.py --evaluator local --sizes 1,4,16,64 --candidates 16 \
      --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput.txt"
    ;;
  round2)
    # 2026-12-05 (seventh session), after the throughput stage (Python workers: 3.0x at 16 envs, 11.9
    # verified correct/min at 64, each turn waiting for a worker to start): the same mix with candidates
    # in the native runner; the GPU cost with the hardware counters off and on (both calls) in the runner
    # (the availability query before the jail now). (Ray vs local: the ray_load stage.)
    PTXGYM_CANDIDATE_PROCESS=native timeout 230 python3 bench/throughput.py --evaluator local --sizes 16,64 \
      --candidates 16 --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native.txt"
    # (hardware counters off: gpu_cost_2026-12-05_pool_gated.txt, same settings otherwise)
    PTXGYM_CANDIDATE_PROCESS=native timeout 75 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_true.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 2 --set verified_pool_partial_jail=true \
      --set hw_counters=true --no-crosscheck-turn
    # the counters alone, with the worker stage by part and the runner's phases of the counted call
    PTXGYM_CANDIDATE_PROCESS=native timeout 75 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_only.txt" \
      --subjects mha_fwd_expert gemm_expert --turns 2 --set verified_pool_partial_jail=true \
      --set hw_counters=true --set sass_count_with_hw=false --no-crosscheck-turn
    ;;
  native_tp)
    # the throughput stage's mix at 16 and 64 envs with candidates in the native runner (budget-sized)
    PTXGYM_CANDIDATE_PROCESS=native timeout 200 python3 bench/throughput.py --evaluator local --sizes 16,64 \
      --candidates 16 --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native.txt"
    ;;
  checks)
    # ninth session: a call's wall now ends after the trusted copy of its outputs, and a GPU time above
    # its wall fails the cross-check: the experts must still pass in the (then default) Python-worker path;
    # below Landlock ABI 8 the driver's pre-jail threads are outside the jail (the reviewer's
    # signal-handler escape needs one that does not block): the jail probe reads their masks
    experts_and_runner 200 240
    jail_probe 90
    ;;
  s10)
    # tenth session, one command (~6 min): the checks stage's tests (the device's GCC 13 <iostream>
    # refused every expert at the build before the fix), then native_tp (cut to what is left), then the
    # jail probe
    experts_and_runner 130 160
    PTXGYM_CANDIDATE_PROCESS=native timeout 90 python3 bench/throughput.py --evaluator local --sizes 16 \
      --candidates 16 --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native.txt"
    jail_probe 60
    ;;
  flip2)
    # the GPU tests whose settings the flip changed: the counted position (hw_counters pinned off there),
    # the in-band counts against Nsight Compute, the runner's own, all in the default path
    timeout 420 bash bench/gpu_tests.sh "$out/flip2" --timeout 410 -q tests/evaluation/test_counted_position_gpu.py \
      tests/evaluation/test_sass_counts.py tests/evaluation/test_native_runner_gpu.py
    ;;
  flip)
    # twelfth session: candidate_process defaults to native; the five experts and the evaluator's GPU suite
    # in the default path (a plain arena's candidate still runs in the Python worker)
    timeout 300 bash bench/gpu_tests.sh "$out/experts" --timeout 290 -q tests/knowledge_packs/test_expert_solutions.py
    timeout 260 bash bench/gpu_tests.sh "$out/evaluator" --timeout 250 -q tests/evaluation/test_gpu_evaluator.py
    ;;
  s16)
    # s15: the broadcast's signals alone hang it; is the error already in the tool's report at the hang?
    timeout 110 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants shipped --timeout 25 --dump-after 15
    ;;
  s15)
    # s14: the broadcast hangs memcheck with or without the signal scope and /tmp writes; its signals
    # alone (the earlier threads take a ruleset that confines nothing they do)?
    timeout 110 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants signal_only --timeout 30 --dump-after 20
    ;;
  s14)
    # s13 found the broadcast the cause (no_broadcast: MEMORY_ERROR in 7 s; the kernel has Landlock's
    # erratum 2 fixed, errata 0x7); which of its restrictions the sanitizer's threads trip over
    timeout 200 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants no_scope tmp_write no_scope_tmp_write --timeout 30 --dump-after 20
    ;;
  s13)
    # twelfth session: why memcheck now hangs on a faulting candidate in the profiled process (s12: 71 s
    # timeout, was 9 s), one sandbox layer changed per row; then the issue-11 audit in the native runner
    # with the hardware-counted call on (its new default: instrumented_wgmma was PAID without it)
    timeout 230 python3 bench/profiled_probe.py --out "$out/profiled_probe.txt" \
      --variants shipped no_broadcast no_scope off --timeout 35 --dump-after 20
    cases=$(python3 -c "from ptxgym.audit.cases import CASES; print(' '.join('--case=' + c.name for c in CASES if c.issue != 'corpus'))")
    { header "audit, native runner, default settings"
      PTXGYM_CANDIDATE_PROCESS=native timeout 300 python3 -c "import sys; from ptxgym.cli.main import main; sys.exit(main(sys.argv[1:]))" audit --evaluator local $cases; } \
      > "$out/audit_native.txt" 2>&1
    ;;
  s12)
    # the profiled process (Nsight Compute's cross-check forced, compute-sanitizer) with the eleventh
    # session's thread broadcast and /proc rules, which no GPU run has exercised there yet
    timeout 300 bash bench/gpu_tests.sh "$out/profiled" --timeout 290 -q \
      tests/evaluation/test_gpu_evaluator.py tests/evaluation/test_sass_counts.py \
      -k "tma_gemm_passes or memcheck_clean_and_error or agree_with_nsight"
    # the runner's seccomp filter keeps its protocol pipes (no close, dup2 or close_range over them)
    PTXGYM_CANDIDATE_PROCESS=native timeout 200 bash bench/gpu_tests.sh "$out/runner" --timeout 190 -q \
      tests/evaluation/test_native_runner_gpu.py
    ;;
  s11a)
    # eleventh session, first command (~6 min): s10's tests and the jail probe (its throughput is s11b)
    experts_and_runner 130 160
    jail_probe 60
    ;;
  s11b)
    # the native runner's throughput at 1, 16 and 64 envs side by side (issue 12's 8x and 40/min goals;
    # the Python-worker figures: throughput_2026-12-05_python.txt), then the hardware counters' GPU cost
    PTXGYM_CANDIDATE_PROCESS=native timeout 420 python3 bench/throughput.py --evaluator local --sizes 1,16,64 \
      --candidates 16 --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput_native.txt"
    PTXGYM_CANDIDATE_PROCESS=native timeout 75 python3 bench/gpu_cost.py --out "$out/gpu_cost_hw_true.txt" \
      --subjects gemm_expert mha_fwd_expert --turns 2 --set verified_pool_partial_jail=true \
      --set hw_counters=true --no-crosscheck-turn
    ;;
  s11c)
    # the wall allowance, honest against hiding candidates in both processes (whether tight_allowance can
    # decide: a reviewer forged CUPTI spans from inside the runner down to the physical floor)
    timeout 300 python3 bench/wall_allowance.py --out "$out/wall_allowance_quiet.txt" --process native python \
      --hidden-us 20 40 80 --repeats 3
    ;;
  s10min)
    # s10's tests only (the experts on the device host, the runner's): for a nearly spent device budget
    experts_and_runner 120 150
    ;;
  s10gemm)
    # the GEMM expert alone on the device host (its GCC 13 build): for a device budget of ~2 minutes
    timeout 100 bash bench/gpu_tests.sh "$out/checks_experts" --timeout 95 -q \
      tests/knowledge_packs/test_expert_solutions.py -k "executed and Gemm"
    ;;
  audit_native)
    PTXGYM_CANDIDATE_PROCESS=native timeout 560 bash bench/gpu_tests.sh "$out/audit_native" --timeout 540 -q -s \
      tests/cli/test_audit.py
    ;;
  spares)
    # the Python-worker path with up to 8 spares warming while candidates queue (PTXGYM_MAX_SPARES),
    # against throughput_2026-12-05_python.txt (2 spares)
    PTXGYM_CANDIDATE_PROCESS=python PTXGYM_MAX_SPARES=8 timeout 300 python3 bench/throughput.py --evaluator local --sizes 16,64 \
      --candidates 16 --candidates-per-env 1 --set ncu_crosscheck_fraction=0 --out "$out/throughput_spares8.txt"
    ;;
  ray_load)
    # the same 16-candidate mix at 16 envs through the Ray backend, then the local one (side by side),
    # then candidate-path parity with 12 nvcc build loops beside the timing
    # shellcheck disable=SC1091
    source bench/carried_ray.sh
    for ev in ray local; do
      timeout 160 python3 bench/throughput.py --evaluator "$ev" --sizes 16 --candidates 16 \
        --set ncu_crosscheck_fraction=0 --out "$out/throughput_16_$ev.txt"
    done
    timeout 230 python3 bench/baseline_parity.py --out "$out/baseline_parity_load.txt" --load 12
    ;;
  load)
    timeout 280 python3 bench/baseline_parity.py --out "$out/baseline_parity_load.txt" --load 12
    timeout 240 python3 bench/baseline_parity.py --out "$out/baseline_parity_quiet.txt"
    ;;
  gate)
    for gated in true false; do
      timeout 200 python3 bench/gpu_cost.py --out "$out/gpu_cost_gated_$gated.txt" --prepare-tasks \
        --subjects gemm_expert mha_fwd_expert --turns 1 --set "gated_proofs=$gated"
    done
    ;;
  *) echo "unknown stage $stage" >&2; exit 2 ;;
esac
