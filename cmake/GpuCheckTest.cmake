# The CPU dry run of scripts/gpu-check.sh (included by the top CMakeLists.txt with the tests):
# bundles this build's memplan, its Debian libraries and two small corpus models into a folder of
# the build tree (gpt and gpt_dynamo), then runs the device side with --device cpu and the project's Python: the smoke
# run, a profile of a plan, the accuracy table, the budget check and the peer table (eager,
# checkpoint, SAC on the CPU), packed as on the device. The script itself fails on a bundle over
# 50 MiB or more than 8 result files; the test then checks the tables' rows.
if(TARGET memplan_executor AND MEMPLAN_PYTHON)
  set(_gpu_dry ${CMAKE_BINARY_DIR}/gpu-check-dry-run)
  set(_gpu_checks
      "grep -q '^| gpt_dynamo | 8 | 50% | [a-z]' summary.md"
      "grep -q '^| gpt | 4 | 75% | [a-z]' summary.md"
      "grep -q '^4 of 4 plans measured at or under their budget' summary.md"
      "grep -q '^| torch | sac | [0-9]' summary.md"
      "grep -q '^| profiler backend | cpu |' summary.md"
      "tar tzf results.tgz | grep -q accuracy.json"
      "! grep -n 'error' summary.md")
  list(JOIN _gpu_checks " && " _gpu_checks)
  add_test(NAME gpu_check_cpu_dry_run
    COMMAND bash -c "rm -rf '${_gpu_dry}' && bash '${PROJECT_SOURCE_DIR}/scripts/gpu-check.sh' --bundle --run \
--device cpu --memplan '$<TARGET_FILE:memplan>' --python '${MEMPLAN_PYTHON}' --models-dir '${MEMPLAN_MODEL_CACHE}' \
--bundle-dir '${_gpu_dry}/bundle' --out '${_gpu_dry}/out' --time-limit 200 && cd '${_gpu_dry}/out' && ${_gpu_checks}")
  # Its runs take both cores (two at a time in the accuracy table).
  set_tests_properties(gpu_check_cpu_dry_run PROPERTIES FIXTURES_REQUIRED corpus TIMEOUT 400 PROCESSORS 2)
endif()
