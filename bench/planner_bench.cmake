# The planner benchmark (included by bench/CMakeLists.txt when memplan_planner exists).
set(MEMPLAN_BENCH_MODEL_CACHE "${CMAKE_BINARY_DIR}/model-cache" CACHE PATH "Models for the benchmarks")
add_executable(bench_planner bench_planner.cc)
target_link_libraries(bench_planner PRIVATE memplan_planner)
target_compile_options(bench_planner PRIVATE ${MEMPLAN_WARNINGS})
target_compile_definitions(bench_planner PRIVATE MEMPLAN_MODEL_CACHE="${MEMPLAN_BENCH_MODEL_CACHE}")
# The fast selective search against its exact reference (CBC) on graphs of a few hundred nodes.
add_executable(bench_selective_reference bench_selective_reference.cc)
target_link_libraries(bench_selective_reference PRIVATE memplan_planner)
target_compile_options(bench_selective_reference PRIVATE ${MEMPLAN_WARNINGS})
target_compile_definitions(bench_selective_reference PRIVATE MEMPLAN_MODEL_CACHE="${MEMPLAN_BENCH_MODEL_CACHE}")
