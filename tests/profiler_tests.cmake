# The profiler's suites (included by tests/CMakeLists.txt when memplan_profiler exists):
# torch-free, and no GPU or CUDA driver needed.
add_executable(profiler_tests
  profiler_test.cc        # aggregation, CPU backend, profile JSON, trace events on hand-made profiles
  profiler_cupti_test.cc  # CUPTI records -> profile from synthetic records; the backend's refusals
)
target_link_libraries(profiler_tests PRIVATE memplan_profiler GTest::gtest_main nlohmann_json::nlohmann_json ${CMAKE_DL_LIBS})
target_compile_options(profiler_tests PRIVATE ${MEMPLAN_WARNINGS})
if(MEMPLAN_HAVE_CUPTI)
  # White-box: the converter's internal header and CUPTI's record structs. CUDA::cupti is an
  # imported target of profiler/, not visible here, so look the toolkit up again.
  find_package(CUDAToolkit QUIET)
  target_include_directories(profiler_tests PRIVATE ${PROJECT_SOURCE_DIR}/profiler/src)
  target_link_libraries(profiler_tests PRIVATE CUDA::cupti)
  target_compile_definitions(profiler_tests PRIVATE MEMPLAN_HAVE_CUPTI=1)
endif()
gtest_discover_tests(profiler_tests DISCOVERY_TIMEOUT 60)
