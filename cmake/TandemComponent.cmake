# One library target per folder, built the same way:
#   tandem_add_component(runtime SOURCES a.cpp b.cpp DEPS TBB::tbb
#                        [CUDA_SOURCES x.cu] [CUDA_DEPS CUDA::cudart] [NOCUDA_SOURCES x_none.cpp])
# CUDA_SOURCES are built only with the CUDA backend, into the object library tandem_<name>_cuda
# that the CUDA plugin (plugins/cuda) is made of; NOCUDA_SOURCES only without it. The core
# never #ifdefs on CUDA and never links a CUDA library.
# creates `tandem_runtime` (alias tandem::runtime) with the repository root on the include
# path, so code includes "runtime/actor.hpp".
set(TANDEM_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)

function(tandem_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TANDEM_WARNINGS}>)
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(TANDEM_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${TANDEM_SANITIZE} -fno-omit-frame-pointer -g)
    target_link_options(${target} PRIVATE -fsanitize=${TANDEM_SANITIZE})
    if(TANDEM_SANITIZE MATCHES "thread")
      # moodycamel's queue uses standalone fences, which TSan does not model, and GCC reports
      # them after inlining, through libstdc++'s <atomic>, so the SYSTEM include does not hide
      # them. Tandem's own hand-off uses none (Actor::claim/resume, ActorSystem::send); the
      # queue's reports are suppressed frame by frame in tests/tsan.supp.
      target_compile_options(${target} PRIVATE -Wno-tsan)
    endif()
  endif()
endfunction()

# Every shared library of the project (components, libtandem.so, plugins) lands in one folder,
# build/lib or <prefix>/lib, and finds its siblings there ($ORIGIN): the plugin loader looks
# for plugins beside the core (runtime/plugin_loader.cpp).
function(tandem_library_defaults target)
  set_target_properties(${target} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
    INSTALL_RPATH "$ORIGIN"
    # keeps the CUDA runtime's directory (outside the system's) on the installed library's path
    INSTALL_RPATH_USE_LINK_PATH ON)
  # Calls inside a library bind directly instead of through the PLT (GCC assumes any exported
  # function may be interposed; clang already does not).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
  endif()
endfunction()

# Links `deps` to the component `target` publicly in the build tree (see tandem_add_component).
function(tandem_link_public target)
  foreach(dep IN LISTS ARGN)
    target_link_libraries(${target} PUBLIC $<BUILD_INTERFACE:${dep}>)
  endforeach()
endfunction()

function(tandem_add_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;CUDA_SOURCES;CUDA_DEPS;NOCUDA_SOURCES" ${ARGN})
  set(target tandem_${name})
  set(sources ${ARG_SOURCES})
  if(NOT TANDEM_HAVE_CUDA)
    list(APPEND sources ${ARG_NOCUDA_SOURCES})
  endif()
  # Shared, so that a back end loaded on first use (the CUDA plugin, plugins/cuda) links the
  # same single copy of the core that the program runs: one logger, one device registry. The
  # fuzz build links them statically, as each fuzz target takes only what its reader needs (and
  # fuzz_config, instrumented for libFuzzer, crashed in the dynamic loader's relocation of its
  # executable against the shared components); it builds no plugin.
  if(TANDEM_FUZZ)
    add_library(${target} STATIC ${sources})
  else()
    add_library(${target} SHARED ${sources})
  endif()
  add_library(tandem::${name} ALIAS ${target})
  # The interface holds in the build tree only: the installed package exports the components
  # (libtandem.so needs them) but promises none of their headers or dependencies.
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
  tandem_link_public(${target} ${ARG_DEPS})
  tandem_library_defaults(${target})
  tandem_target_defaults(${target})
  # The CUDA part: objects for the CUDA plugin (plugins/cuda), never in the component itself.
  if(TANDEM_HAVE_CUDA AND ARG_CUDA_SOURCES)
    add_library(${target}_cuda OBJECT ${ARG_CUDA_SOURCES})
    target_link_libraries(${target}_cuda PUBLIC ${target} ${ARG_CUDA_DEPS})
    target_compile_definitions(${target}_cuda PUBLIC TANDEM_HAVE_CUDA=1)
    set_target_properties(${target}_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
    tandem_target_defaults(${target}_cuda)
  endif()
endfunction()

# tandem_add_test(name SOURCES ... DEPS ... [LABELS ...]): one gtest executable, registered
# with ctest through gtest_discover_tests so each TEST is its own ctest entry.
include(GoogleTest)
function(tandem_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} tandem_test_crash_report GTest::gtest_main
                        GTest::gtest)
  tandem_target_defaults(${name})
  # -rdynamic: the crash report's stack names the test's own functions.
  set_target_properties(${name} PROPERTIES ENABLE_EXPORTS ON)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()

# tandem_add_bench(name SOURCES ... DEPS ...): a Google Benchmark executable.
function(tandem_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  tandem_target_defaults(${name})
endfunction()
