# Executor tests (included by tests/CMakeLists.txt when memplan_executor exists).
# The ONNX backend node cases of the pinned onnx (the wheel carries their generators, not their
# data): written once into the model cache (the script skips when the cache holds its onnx
# version's cases); the conformance test reads them beside Debian's ONNX 1.12 cases.
set(MEMPLAN_ONNX_NODE_CASES "${MEMPLAN_MODEL_CACHE}/onnx-node-cases")
add_test(NAME export_onnx_node_cases
  COMMAND ${MEMPLAN_PYTHON} ${PROJECT_SOURCE_DIR}/samples/onnx_node_cases.py --out ${MEMPLAN_ONNX_NODE_CASES})
set_tests_properties(export_onnx_node_cases PROPERTIES FIXTURES_SETUP onnx_node_cases TIMEOUT 600)

add_executable(executor_conformance_tests executor_conformance_test.cc)
target_link_libraries(executor_conformance_tests PRIVATE memplan_executor GTest::gtest_main)
target_compile_definitions(executor_conformance_tests PRIVATE MEMPLAN_ONNX_NODE_CASES="${MEMPLAN_ONNX_NODE_CASES}")
# One ctest entry for its ~2,900 gtest cases (one per ONNX backend case): a process per case
# would load LibTorch thousands of times. Failures are listed by case name in the output.
add_test(NAME executor_conformance COMMAND executor_conformance_tests --gtest_brief=1)
set_tests_properties(executor_conformance PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED onnx_node_cases)

add_executable(executor_tests executor_training_test.cc executor_accuracy_test.cc executor_calibration_test.cc)
target_link_libraries(executor_tests PRIVATE memplan_executor memplan_testing GTest::gtest_main)
if(TARGET memplan_planner)
  # Hugging Face models: accuracy without a plan, and a selective plan at its budget.
  target_sources(executor_tests PRIVATE executor_hf_test.cc executor_stochastic_depth_test.cc)
  target_link_libraries(executor_tests PRIVATE memplan_planner)
endif()
# gpt and mobilenet_v2 (convnext for stochastic depth) in `make test`; the rest in `make check`.
set(_long "ExecutorSelective.MeasuredPeakIsTheReplayedPeak" "ExecutorOffload.MeasuredPeaksAreTheReplayedPeaks"
          "Corpus/StochasticDepth.*/swin*")
foreach(m resnet vgg densenet efficientnet googlenet gpt_deep swin vit)
  list(APPEND _long "Corpus/ExecutorAccuracy.*/${m}*")
endforeach()
memplan_discover_tests(executor_tests LONG ${_long} PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED corpus)

if(TARGET memplan_planner)
  add_executable(executor_budget_tests executor_budget_test.cc executor_schedule_test.cc executor_profile_test.cc)
  target_link_libraries(executor_budget_tests PRIVATE memplan_executor memplan_planner memplan_testing GTest::gtest_main)
  # Plans run for real at their budgets: gpt (and mobilenet_v2's schedule) in `make test`, the other
  # models in `make check`.
  set(_long "Corpus/ProfileCorpus.*/resnet18*" "Corpus/ProfileCorpus.*/vit*" "Corpus/ProfileCorpus.*/mobilenet*"
            "Corpus/ProfileRecompute.*/resnet18*")
  foreach(m resnet mobilenet efficientnet vit gpt_dynamo regnet)
    list(APPEND _long "Corpus/PlanBudget.*/${m}*")
  endforeach()
  foreach(m resnet mobilenet efficientnet vit swin)
    list(APPEND _long "Corpus/OffloadBudget.*/${m}*")
  endforeach()
  foreach(m resnet densenet efficientnet googlenet gpt_deep gpt_dynamo mobilenet_v2_dynamo swin vgg vit)
    list(APPEND _long "Corpus/ExecutorSchedule.*/*${m}*")
  endforeach()
  memplan_discover_tests(executor_budget_tests LONG ${_long} PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED corpus)

  add_executable(executor_cli_tests executor_cli_test.cc)
  target_link_libraries(executor_cli_tests PRIVATE memplan_profiler memplan_testing GTest::gtest_main nlohmann_json::nlohmann_json)
  add_dependencies(executor_cli_tests memplan)
  gtest_discover_tests(executor_cli_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED corpus)
endif()

# Data parallelism (issue 12): ranks are processes (executor_distributed_rank, or memplan run
# under torchrun's environment) on loopback Gloo.
if(TARGET memplan_planner)
  add_executable(executor_distributed_rank executor_distributed_rank.cc)
  target_link_libraries(executor_distributed_rank PRIVATE memplan_executor memplan_planner nlohmann_json::nlohmann_json)
  add_executable(executor_distributed_tests executor_distributed_test.cc)
  target_link_libraries(executor_distributed_tests PRIVATE memplan_executor memplan_planner memplan_run_report memplan_testing
                        GTest::gtest_main nlohmann_json::nlohmann_json)
  target_compile_definitions(executor_distributed_tests PRIVATE MEMPLAN_DP_RANK="$<TARGET_FILE:executor_distributed_rank>")
  add_dependencies(executor_distributed_tests executor_distributed_rank memplan)
  # Each test starts its ranks on a free port, so ports never clash; but 2-4 rank processes
  # take every core, and a timing test beside them (ProfileCorpus) measured 93% where it
  # needs 95%: PROCESSORS 2 gives them the machine's two ctest slots.
  # gpt with sharded parameters and every 2-rank exactness case in `make test`; the rest in
  # `make check`.
  set(_long "Corpus/DistributedPeaks.*/resnet18_*" "DistributedShardParameters.SegmentedRanksGatherInEveryPassAndMatchTheReplay")
  foreach(c gpt_none gpt_gradients gpt_optimizer)
    list(APPEND _long "Corpus/DistributedPeaks.*/${c}")
  endforeach()
  foreach(c sgd_none sgd_optimizer sgd_gradients sgd_parameters adam_none adam_optimizer adam_gradients)
    list(APPEND _long "Loopback/DistributedExactness.*/4ranks_${c}")
  endforeach()
  memplan_discover_tests(executor_distributed_tests LONG ${_long}
                         PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED corpus PROCESSORS 2)
endif()
