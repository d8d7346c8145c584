# Executor benchmarks (included by bench/CMakeLists.txt when memplan_executor exists).
add_executable(bench_executor bench_executor.cc)
target_link_libraries(bench_executor PRIVATE memplan_executor benchmark::benchmark)
target_compile_definitions(bench_executor PRIVATE MEMPLAN_MODEL_DIR="${CMAKE_BINARY_DIR}/model-cache")
