# The CPU dry run of scripts/gpu-check.sh (included by the top CMakeLists.txt with the tests):
# bundles this build's memplan, its Debian libraries and two small corpus models (gpt and
# gpt_dynamo) into a folder of the build tree, then runs the device side with --device cpu and
# the project's Python: the smoke run, a profile of a plan, the accuracy table, the budget check
# and the peer table (eager, checkpoint, SAC on the CPU), packed as on the device. The script
# itself fails on a bundle over its size limit or more than 8 result files; the test then checks
# the tables' rows.
if(TARGET memplan_executor AND MEMPLAN_PYTHON)
  set(_gpu_dry ${CMAKE_BINARY_DIR}/gpu-check-dry-run)
  set(_gpu_checks
      "grep -q '^| gpt_dynamo | 8 | 50% | [a-z]' summary.md"
      "grep -q '^| gpt | 4 | 75% | [a-z]' summary.md"
      "grep -q '^[1-9][0-9]* of [1-9][0-9]* plans measured at or under their budget' summary.md"
      "! grep -q '| OVER |' summary.md"
      "grep -q '^| torch | sac | [0-9]' summary.md"
      "grep -q '^| profiler backend | cpu |' summary.md"
      "tar tzf results.tgz | grep -q accuracy.json"
      "! grep -n 'error' summary.md")
  list(JOIN _gpu_checks " && " _gpu_checks)
  # A memplan with the GUI links Qt (about 70 MiB of libraries); the bundles for a GPU are built
  # without it and must stay under 50 MiB.
  set(_gpu_max_mib 50)
  if(TARGET memplan_gui_lib)
    set(_gpu_max_mib 150)
  endif()
  add_test(NAME gpu_check_cpu_dry_run
    COMMAND bash -c "rm -rf '${_gpu_dry}' && bash '${PROJECT_SOURCE_DIR}/scripts/gpu-check.sh' --bundle --run \
--device cpu --memplan '$<TARGET_FILE:memplan>' --python '${MEMPLAN_PYTHON}' --models-dir '${MEMPLAN_MODEL_CACHE}' \
--bundle-dir '${_gpu_dry}/bundle' --max-mib ${_gpu_max_mib} --out '${_gpu_dry}/out' --time-limit 200 && cd '${_gpu_dry}/out' && ${_gpu_checks}")
  # Its runs take both cores (two at a time in the accuracy table).
  set_tests_properties(gpu_check_cpu_dry_run PROPERTIES FIXTURES_REQUIRED corpus TIMEOUT 400 PROCESSORS 2 LABELS long)
endif()
