# The planner's suites (included by tests/CMakeLists.txt when memplan_planner exists).
add_executable(planner_tests
  planner_schedule_test.cc     # segmented schedules: hand-computed peaks, one segment == plain step
  planner_strategies_test.cc   # strategies on small graphs; brute force over all segmentations
  planner_json_test.cc         # plan JSON round trip and rejection
  planner_corpus_test.cc       # every strategy on every corpus model; DP tables == replay
  planner_cli_test.cc          # memplan plan: exit codes, summary, JSON
  planner_microbatch_test.cc   # micro-batching: hand-computed peaks, search, corpus at 50%
  planner_time_test.cc         # roofline seconds, predicted recompute seconds, calibration
  planner_selective_test.cc    # selective recompute: hand-computed peaks and plans, brute force, JSON, corpus
  planner_selective_exact_test.cc  # the exact selective reference: its relaxation and brute force
  planner_offload_test.cc      # offload: hand-computed device/host peaks and stalls, strategy, JSON
  planner_parallel_test.cc     # data parallelism: buckets, per-rank memory per shard mode, JSON, corpus
  planner_agreement_test.cc    # one smallest budget everywhere, auto >= every strategy, names kept (corpus)
  planner_device_test.cc       # workspace margins of unverified CPU kernels, the card as a budget
)
# memplan_profiler: the CLI tests write profiles for `plan --costs`.
target_link_libraries(planner_tests PRIVATE memplan_planner memplan_profiler memplan_testing GTest::gtest_main nlohmann_json::nlohmann_json)
# White-box tests of the DP tables read the planner's private headers.
target_include_directories(planner_tests PRIVATE ${PROJECT_SOURCE_DIR}/planner/src)
add_dependencies(planner_tests memplan)
gtest_discover_tests(planner_tests TEST_FILTER "-*PlannerCorpus*:*MicroBatchCorpus*:*SelectiveCorpus*:*ParallelCorpus*:*AgreementCorpus*:*OffloadCorpus*" DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 900)
# The corpus suites: gpt and mobilenet_v2 in `make test` (a transformer, a CNN with batch norm),
# the other models in `make check`.
# The agreement of every strategy's smallest budget takes 1-2 min per model on resnet18, vgg16 and
# vit_b_16 (make check) and 4-9 min on the others (make check-exhaustive).
set(_long)
set(_exhaustive)
foreach(m resnet18 vgg16 vitb16)
  list(APPEND _long "Models/PlannerAgreementCorpus.*/${m}")
endforeach()
foreach(m resnet50 mobilenetv2 densenet121 efficientnetb0 googlenet swint gptdeep)
  list(APPEND _exhaustive "Models/PlannerAgreementCorpus.*/${m}")
endforeach()
foreach(m densenet121 efficientnet_b0 gpt_deep resnet50 swin_t vit_b_16)
  list(APPEND _long "Models/SelectiveCorpusPlans.*/${m}")
endforeach()
foreach(m densenet121 efficientnet_b0 gpt_deep resnet50 swin_t vit_b_16)
  list(APPEND _long "Models/OffloadCorpus.*/${m}")
endforeach()
foreach(m densenet121 efficientnetb0 googlenet gptdeep resnet18 resnet50 swint vgg16 vitb16)
  list(APPEND _long "Models/PlannerCorpus.EveryStrategyReplaysWithinItsBudget/${m}")
endforeach()
memplan_discover_tests(planner_tests
  FILTER "*PlannerCorpus*:*MicroBatchCorpus*:*SelectiveCorpus*:*ParallelCorpus*:*AgreementCorpus*:*OffloadCorpus*"
  LONG ${_long}
  EXHAUSTIVE ${_exhaustive}
  PROPERTIES TIMEOUT 1800 FIXTURES_REQUIRED corpus)
