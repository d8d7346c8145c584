# Tests of the Qt6 dashboard (included by tests/CMakeLists.txt when target memplan_gui exists).
# Widgets render on Qt's offscreen platform; no display is needed.
find_package(Qt6 QUIET COMPONENTS Widgets Charts Test)
if(NOT TARGET Qt6::Test)
  message(STATUS "memplan gui tests: Qt6 Test not found; gui_tests not built")
  return()
endif()
add_executable(gui_tests gui_test_main.cc gui_test_profile.cc gui_test_selective.cc gui_document_test.cc gui_models_test.cc
                         gui_widgets_test.cc gui_plan_worker_test.cc gui_settings_test.cc
                         gui_offload_test.cc)
# The planner library: selective plans for the tests are replayed by ReplaySelective.
target_link_libraries(gui_tests PRIVATE memplan_gui memplan_planner memplan_testing Qt6::Widgets Qt6::Charts Qt6::Test
                      GTest::gtest nlohmann_json::nlohmann_json)
target_include_directories(gui_tests PRIVATE ${PROJECT_SOURCE_DIR}/gui/src)
add_dependencies(gui_tests memplan)
if(TARGET Qt6::Svg)
  target_compile_definitions(gui_tests PRIVATE MEMPLAN_GUI_HAVE_SVG=1)
endif()
gtest_discover_tests(gui_tests DISCOVERY_TIMEOUT 60
  PROPERTIES TIMEOUT 900 FIXTURES_REQUIRED corpus ENVIRONMENT QT_QPA_PLATFORM=offscreen)
